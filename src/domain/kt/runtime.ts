import { hostname } from "node:os";
import type { Logger } from "pino";
import type { Clock } from "../../clock.js";
import type { KtConfig } from "../../config-kt.js";
import { KT_TIMES } from "../../config-kt.js";
import type { EscrowKeyInfo } from "../../crypto/escrow-keys.js";
import { randomId } from "../../ids.js";
import { type NoteSigner, parseVkey } from "../../kt/note.js";
import type { Store } from "../../store/types.js";
import { settleBinMoves } from "./bin-moves.js";
import { CardRefSeal } from "./card-seal.js";
import { type DirectorySource, storeDirectorySource, storeIssuerDetails } from "./directory-source.js";
import { KtReads } from "./reads.js";
import { Sequencer, type SequencerLeases } from "./sequencer.js";
import { KtLogService } from "./service.js";
import { storeSigningKeys } from "./signed.js";
import type { KtSigningKeys } from "./statement-check.js";
import { CachedTiles } from "./tile-cache.js";
import { WitnessClient, type WitnessEndpoint } from "./witness-client.js";

/** What the key log of one service instance is built from. */
export interface KtRuntimeOptions {
  store: Store;
  clock: Clock;
  logger: Logger;
  /** The pepper: the card references of pending statements are sealed under a key derived from it. */
  pepper: string;
  config: KtConfig;
  /** The log's signing key (its name is the origin). */
  signer: NoteSigner;
  leases: SequencerLeases;
  /** The tenants' signing keys; default the store's (`store.ktIssuers`). */
  signingKeys?: KtSigningKeys;
  /** Where snapshots are read; default the stores' BINs and escrow keys, and `serviceEscrowKey`. */
  directory?: DirectorySource;
  /** The service escrow key that seals (listed in snapshots). */
  serviceEscrowKey?: EscrowKeyInfo;
  /** This instance's name in the sequencer's lease; default host name and a random suffix. */
  holder?: string;
  /** The HTTP client for witnesses (tests). */
  fetch?: typeof fetch;
}

/** The key log of one instance: the service the domain calls, and its sequencer loop. */
export interface KtRuntime {
  log: KtLogService;
  /** The public reads of `/kt/v1`, over the same tile cache. */
  reads: KtReads;
  sequencer: Sequencer;
  /** Starts the sequencer loop (when `KT_SEQUENCER` is on). */
  start(): void;
  stop(): Promise<void>;
}

/** The witnesses of the configuration as endpoints (the configuration checked their keys). */
export function witnessEndpoints(config: KtConfig): WitnessEndpoint[] {
  return config.witnesses.map(({ url, vkey }) => {
    const key = parseVkey(vkey);
    if (key === undefined) throw new Error(`bad witness vkey ${vkey}`);
    return { url, key };
  });
}

/** Builds the key log of an instance; nothing runs until `start`. */
export function createKtRuntime(options: KtRuntimeOptions): KtRuntime {
  const { store, clock, logger, config } = options;
  const tiles = new CachedTiles(store.ktLog);
  const seal = new CardRefSeal(options.pepper);
  const signingKeys = options.signingKeys ?? storeSigningKeys(store);
  const endpoints = witnessEndpoints(config);
  const witnesses = new WitnessClient({
    witnesses: endpoints,
    store: store.ktLog,
    tiles,
    clock,
    logger,
    timeoutMs: config.witnessTimeoutMs,
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
  });
  let sequencer: Sequencer | undefined;
  const log = new KtLogService({
    log: store.ktLog,
    clock,
    signer: options.signer,
    seal,
    tiles,
    witnessNames: endpoints.map((w) => w.key.name),
    answerCosignatures: config.answerCosignatures,
    waitMs: config.waitMs,
    wake: () => sequencer?.wake(),
    maxBindingDays: config.maxBindingDays,
  });
  sequencer = new Sequencer(
    {
      log: store.ktLog,
      seal,
      signingKeys,
      maxBindingDays: config.maxBindingDays,
      leases: options.leases,
      clock,
      logger: logger.child({ component: "kt-sequencer" }),
      signer: options.signer,
      directory:
        options.directory ??
        storeDirectorySource(
          store,
          options.serviceEscrowKey,
          storeIssuerDetails(store, () => clock.now()),
        ),
      witnesses,
      tiles,
      onCheckpoint: () => log.checkpointed(),
      settle: (now) => settleBinMoves(store, now, logger),
      audit: store.audit,
    },
    {
      holder: options.holder ?? `${hostname()}:${process.pid}:${randomId("seq", 6)}`,
      batchSize: KT_TIMES.batchSize,
      leaseTtlMs: KT_TIMES.leaseTtlMs,
      pollMs: config.sequencerPollMs,
      witnessIntervalMs: KT_TIMES.witnessIntervalMs,
      directoryRefreshMs: KT_TIMES.directoryRefreshMs,
      maxBindingDays: config.maxBindingDays,
    },
  );
  const running = sequencer;
  return {
    log,
    reads: new KtReads(store.ktLog, tiles),
    sequencer: running,
    start: () => {
      if (config.sequencer) running.start();
    },
    stop: () => running.stop(),
  };
}

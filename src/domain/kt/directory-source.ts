import { createHash } from "node:crypto";
import type { EscrowKeyInfo } from "../../crypto/escrow-keys.js";
import { base64url } from "../../kt/bytes.js";
import type {
  DirectorySnapshot,
  EscrowKeyRef,
  IssuerEntry,
  PrefixEntry,
  SigningKeyEntry,
} from "../../kt/directory.js";
import { formatTime } from "../../kt/statements.js";
import { sequenceName } from "../../store/kt-sequence.js";
import type { Store } from "../../store/types.js";
import { BIN_MOVE_DELAY_MS } from "./bin-moves.js";

/**
 * Where the sequencer reads the directory it snapshots (docs/key-transparency.md): every issuer with its BIN
 * and token-BIN prefixes, signing keys, `requireBindings`, `plaintextIntake`, current escrow key and
 * tenant-statement version, and the service escrow key. It reads at the moment of the snapshot, after
 * the change that asked for one was committed.
 */
export interface DirectorySource {
  read(
    now: Date,
    previous: DirectorySnapshot | undefined,
  ): Promise<Pick<DirectorySnapshot, "issuers" | "serviceEscrowKey">>;
}

/**
 * What an issuer's entry holds beyond what the stores of today know (BINs and token BINs, escrow keys): its signing
 * keys and settings, from the signing-key store when there is one. Without it an issuer has no
 * signing keys, `requireBindings` false and `plaintextIntake` "accept".
 */
export interface IssuerDetails {
  /** Issuer tenants with details of their own (a tenant with signing keys and nothing else). */
  tenants(): Promise<string[]>;
  details(
    tenantId: string,
  ): Promise<Partial<Pick<IssuerEntry, "signingKeys" | "requireBindings" | "plaintextIntake">>>;
  /** BIN prefixes announced as moving from one tenant to another, not yet handed over (`bin-moves.ts`). */
  moves?(): Promise<BinMoveRef[]>;
}

/** A prefix moving from tenant `from` to tenant `to`. */
export interface BinMoveRef {
  prefix: string;
  kind: "bin" | "token-bin";
  from: string;
  to: string;
}

/** A move with the time it takes effect, as the snapshot shows it. */
interface TimedMove extends BinMoveRef {
  effectiveFrom: string;
}

/**
 * The issuer details the stores hold (`store.ktIssuers`): each tenant's signing keys with their
 * status, `requireBindings` and `plaintextIntake`. A key counts from the snapshot that first lists it with its status
 * (`storeDirectorySource` keeps that time in later snapshots).
 */
export function storeIssuerDetails(store: Pick<Store, "ktIssuers">, now: () => Date): IssuerDetails {
  return {
    tenants: async () => (await store.ktIssuers.list()).map((r) => r.tenantId),
    moves: async () =>
      (await store.ktIssuers.list()).flatMap((r) =>
        (r.binMoves ?? []).map((m) => ({ prefix: m.prefix, kind: m.kind, from: m.from, to: r.tenantId })),
      ),
    async details(tenantId) {
      const record = await store.ktIssuers.get(tenantId);
      if (record === undefined) return {};
      const since = formatTime(now().getTime());
      return {
        requireBindings: record.requireBindings,
        plaintextIntake: record.plaintextIntake ?? "accept",
        signingKeys: record.signingKeys.map((k) => ({
          signingKeyId: k.signingKeyId,
          algorithm: k.algorithm,
          spki: k.spki,
          role: k.role,
          status: k.status,
          effectiveFrom: since,
        })),
      };
    },
  };
}

/** The escrow key reference of a base64 SPKI. */
export function escrowKeyRef(keyId: string, algorithm: string, spkiBase64: string): EscrowKeyRef {
  const digest = createHash("sha256").update(Buffer.from(spkiBase64, "base64")).digest();
  return { keyId, algorithm, spkiSha256: base64url(new Uint8Array(digest)) };
}

/**
 * The directory as the stores hold it: the issuer tenants (of issuer API keys, and of `details`),
 * each with its BINs, current escrow key and tenant-statement version as the log appended it;
 * `details` adds signing keys and settings. A prefix or signing key keeps the `effectiveFrom` the
 * previous snapshot gave it, so an unchanged entry is the same in every snapshot; a new one counts from
 * `now`.
 */
export function storeDirectorySource(
  store: Store,
  serviceEscrowKey: EscrowKeyInfo | undefined,
  details?: IssuerDetails,
): DirectorySource {
  return {
    async read(now, previous) {
      const keys = await store.apiKeys.list();
      const tenants = new Set(keys.filter((k) => k.role === "issuer").map((k) => k.tenantId));
      for (const tenant of (await details?.tenants()) ?? []) tenants.add(tenant);
      const moves = timedMoves((await details?.moves?.()) ?? [], now, previous);
      const issuers: IssuerEntry[] = [];
      for (const tenant of [...tenants].sort()) {
        const entry = await issuerEntryOf(store, tenant, now, previous, details, moves);
        if (entry !== undefined) issuers.push(entry);
      }
      const service =
        serviceEscrowKey === undefined
          ? null
          : escrowKeyRef(serviceEscrowKey.keyId, serviceEscrowKey.algorithm, serviceEscrowKey.spki);
      return { issuers, serviceEscrowKey: service };
    },
  };
}

/**
 * Each announced move with the time it takes effect: the time the previous snapshot gave it under its
 * new owner, or, for a move no snapshot showed yet, {@link BIN_MOVE_DELAY_MS} after this snapshot
 * (the first that shows it).
 */
function timedMoves(moves: BinMoveRef[], now: Date, previous: DirectorySnapshot | undefined): TimedMove[] {
  return moves.map((m) => {
    const shown = previous?.issuers
      .find((i) => i.issuer === m.to)
      ?.prefixes.find((p) => p.prefix === m.prefix && p.kind === m.kind);
    return { ...m, effectiveFrom: shown?.effectiveFrom ?? formatTime(now.getTime() + BIN_MOVE_DELAY_MS) };
  });
}

async function issuerEntryOf(
  store: Store,
  tenant: string,
  now: Date,
  previous: DirectorySnapshot | undefined,
  details: IssuerDetails | undefined,
  moves: readonly TimedMove[] = [],
): Promise<IssuerEntry | undefined> {
  const [bins, tokenBins, escrow, extra, logged] = await Promise.all([
    store.bins.list(tenant, "bin"),
    store.bins.list(tenant, "token-bin"),
    store.issuerEscrowKeys.current(tenant),
    details?.details(tenant) ?? Promise.resolve(undefined),
    store.ktLog.loggedStates([sequenceName.tenant(tenant)]),
  ]);
  const signingKeys = extra?.signingKeys ?? [];
  const incoming = moves.filter((m) => m.to === tenant);
  if (
    bins.length === 0 &&
    tokenBins.length === 0 &&
    incoming.length === 0 &&
    escrow === undefined &&
    signingKeys.length === 0
  ) {
    return undefined;
  }
  const before = previous?.issuers.find((i) => i.issuer === tenant);
  const since = formatTime(now.getTime());
  const owned = [
    ...bins.map((prefix) => ({ prefix, kind: "bin" as const })),
    ...tokenBins.map((prefix) => ({ prefix, kind: "token-bin" as const })),
  ].map(({ prefix, kind }) => ({
    prefix,
    kind,
    effectiveFrom:
      before?.prefixes.find((p) => p.prefix === prefix && p.kind === kind)?.effectiveFrom ?? since,
    // A prefix moving away counts until the move takes effect.
    effectiveUntil:
      moves.find((m) => m.from === tenant && m.prefix === prefix && m.kind === kind)?.effectiveFrom ?? null,
  }));
  const prefixes: PrefixEntry[] = [
    ...owned,
    ...incoming.map((m) => ({
      prefix: m.prefix,
      kind: m.kind,
      effectiveFrom: m.effectiveFrom,
      effectiveUntil: null,
    })),
  ].sort((a, b) => (a.kind + a.prefix < b.kind + b.prefix ? -1 : 1));
  return {
    issuer: tenant,
    version: logged.get(sequenceName.tenant(tenant))?.version ?? 0,
    requireBindings: extra?.requireBindings ?? false,
    plaintextIntake: extra?.plaintextIntake ?? "accept",
    signingKeys: signingKeys.map((k) => keepEffectiveFrom(k, before, since)),
    prefixes,
    escrowKey:
      escrow === undefined ? null : escrowKeyRef(escrow.escrowKeyId, escrow.algorithm, escrow.publicKey),
  };
}

/**
 * A signing key's `effectiveFrom`: the `issuedAt` of the first snapshot that listed it with its
 * status (`since`, this snapshot's time, for a key new or changed since the previous one). For a
 * root that is the snapshot of its confirmation; the merchant's client counts `KT_ROOT_DELAY` not
 * from it but from the witnesses' first cosignature of a checkpoint it saw the root current in
 * (`kt/root-delay.ts`), a time the service cannot set.
 */
function keepEffectiveFrom(
  key: SigningKeyEntry,
  before: IssuerEntry | undefined,
  since: string,
): SigningKeyEntry {
  const old = before?.signingKeys.find((k) => k.signingKeyId === key.signingKeyId && k.status === key.status);
  return { ...key, effectiveFrom: old?.effectiveFrom ?? since };
}

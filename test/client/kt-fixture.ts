import { generateKeyPairSync, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { base64, base64url, toHex } from "../../src/kt/bytes.js";
import type { EscrowKeyRef } from "../../src/kt/directory.js";
import { canonicalJson } from "../../src/kt/json.js";
import { formatTime } from "../../src/kt/statements.js";
import type { KtLookupAnswer } from "../../src/kt/wire.js";
import { nodeSha256 } from "../kt/support.js";
import { answerFor, bindingOf, type Issuer, makeIssuer, NOW, snapshotOf, World } from "../kt/world.js";

/**
 * A malicious key directory for the client library's tests (issue 32): an honest log (a log key,
 * three witnesses of two organisations, two issuers with their BINs) and, beside the honest answer
 * for a card, each lie a dishonest service could tell a merchant about that card's key. An HTTP server
 * serves the answers and snapshots and records every request it receives, so a test can see that a
 * refused key led to nothing sent.
 */

export const HASHED_PAN = "ab".repeat(32);
/** The card's own BIN (the card number's first 8 digits), owned by bank-a. */
export const CARD_BIN = "41111111";
export const HPKE = "HPKE-P256-SHA256-A256GCM";

/** A P-256 key whose private half the test holds, so what is sealed to it can be opened. */
export interface DeviceKey {
  keyId: string;
  spki: Uint8Array;
  spkiSha256: string;
  /** Base64 PKCS#8. */
  privateKey: string;
}

export function makeDeviceKey(): DeviceKey {
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const spki = new Uint8Array(publicKey.export({ format: "der", type: "spki" }));
  const h = randomBytes(16).toString("hex");
  return {
    keyId: `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`,
    spki,
    spkiSha256: base64url(nodeSha256(spki)),
    privateKey: privateKey.export({ format: "der", type: "pkcs8" }).toString("base64"),
  };
}

/** The lies of issue 32's fixture list, and the honest answer. */
export const LIES = [
  "unsigned attacker key",
  "attacker key signed by its own key",
  "signed by an issuer that does not own the BIN",
  "valid statement, proof of another leaf",
  "service escrow key for a BIN-owned card",
  "expired statement",
  "forked checkpoint, the log's signature alone",
  "forked checkpoint, cosignatures copied from the real one",
] as const;
export type Lie = (typeof LIES)[number];

/** An answer and the snapshot body it names. */
export interface Scenario {
  answer: KtLookupAnswer & { aadBound?: boolean };
  snapshot: string;
  /** The private key of the key the answer names, when the test holds it. */
  key: DeviceKey;
}

/** An honest log with a registered card, and the scenarios built on it. */
export class Directory {
  readonly world = new World();
  /** bank-a, owner of the card's BIN; a test may give its own signing key (then it signs each statement itself). */
  readonly bank: Issuer;
  readonly other: Issuer = makeIssuer("bank-b");
  readonly device = makeDeviceKey();
  readonly issuerEscrow = makeDeviceKey();
  readonly serviceEscrow = makeDeviceKey();
  readonly snapshot: string;

  constructor(bank: Issuer = makeIssuer("bank-a")) {
    this.bank = bank;
    this.snapshot = snapshotOf(
      [
        { issuer: this.bank, bins: ["411111"], escrowKey: ref(this.issuerEscrow) },
        { issuer: this.other, bins: ["522222"] },
      ],
      { serviceEscrowKey: ref(this.serviceEscrow) },
    );
  }

  /**
   * The answer for `key` under a statement signed elsewhere (by the test's own signing key), logged
   * as the service logs a registration.
   */
  signed(
    key: { keyId: string; spki: Uint8Array },
    statement: string,
    signature: Uint8Array,
  ): Scenario["answer"] {
    const signWith = { ...this.bank, sign: () => signature };
    const answer = answerFor(this.world, {
      statement,
      signer: this.bank,
      signWith,
      key,
      snapshot: this.snapshot,
    });
    return { ...answer, aadBound: true };
  }

  /** The honest answer for the card. */
  honest(): Scenario {
    return this.bound(this.device, bindingOf(this.bank, this.device, HASHED_PAN), this.bank);
  }

  /** One lie about the card's key. */
  lie(lie: Lie): Scenario {
    const attacker = makeDeviceKey();
    switch (lie) {
      case "unsigned attacker key": {
        const {
          binding: _b,
          opening: _o,
          proof,
          ...rest
        } = this.bound(attacker, bindingOf(this.bank, attacker, HASHED_PAN), this.bank).answer;
        return {
          answer: { ...rest, checkpoint: proof?.checkpoint as string },
          snapshot: this.snapshot,
          key: attacker,
        };
      }
      case "attacker key signed by its own key": {
        const forger = makeIssuer("bank-a");
        const scenario = this.bound(attacker, bindingOf(this.bank, attacker, HASHED_PAN), forger);
        const binding = scenario.answer.binding as NonNullable<KtLookupAnswer["binding"]>;
        return {
          ...scenario,
          answer: { ...scenario.answer, binding: { ...binding, signingKeyId: this.bank.signingKeyId } },
        };
      }
      case "signed by an issuer that does not own the BIN":
        return this.bound(
          attacker,
          bindingOf(this.other, attacker, HASHED_PAN, { bin: CARD_BIN }),
          this.other,
        );
      case "valid statement, proof of another leaf": {
        const honest = this.honest();
        const other = this.bound(
          makeDeviceKey(),
          bindingOf(this.bank, makeDeviceKey(), "cd".repeat(32)),
          this.bank,
        );
        const proof = other.answer.proof as NonNullable<KtLookupAnswer["proof"]>;
        return { ...honest, answer: { ...honest.answer, proof, directory: other.answer.directory } };
      }
      case "service escrow key for a BIN-owned card": {
        const { binding: _b, opening: _o, proof, ...rest } = this.honest().answer;
        const escrow = this.serviceEscrow;
        return {
          answer: {
            ...rest,
            keyId: escrow.keyId,
            publicKey: base64(escrow.spki),
            isEscrowed: true,
            aadBound: true,
            checkpoint: proof?.checkpoint as string,
          },
          snapshot: this.snapshot,
          key: escrow,
        };
      }
      case "expired statement":
        return this.bound(
          this.device,
          bindingOf(this.bank, this.device, HASHED_PAN, {
            notBefore: formatTime(NOW - 40 * 86_400_000),
            notAfter: formatTime(NOW - 6 * 86_400_000),
          }),
          this.bank,
        );
      case "forked checkpoint, the log's signature alone":
      case "forked checkpoint, cosignatures copied from the real one":
        return this.fork(attacker, lie.endsWith("copied from the real one"));
    }
  }

  /**
   * A fork: the log signs a second tree of the size the witnesses saw, holding the attacker's binding
   * where the real tree holds other leaves. No honest witness cosigns it, so the service can show the
   * log's signature alone, or the real checkpoint's cosignatures pasted under it.
   */
  private fork(attacker: DeviceKey, pasteCosignatures: boolean): Scenario {
    const fork = new World();
    Object.defineProperty(fork, "log", { value: this.world.log });
    for (const leaf of this.world.leaves) fork.append(leaf);
    const statement = bindingOf(this.bank, attacker, HASHED_PAN);
    const answer = answerFor(fork, { statement, signer: this.bank, key: attacker, snapshot: this.snapshot });
    this.honest();
    const real = this.world.checkpoint();
    const proof = answer.proof as NonNullable<KtLookupAnswer["proof"]>;
    if (this.world.tree.size !== fork.tree.size) throw new Error("the fork must have the real tree's size");
    const forged = fork.checkpoint({ cosigners: [] });
    const cosignatures = real
      .slice(real.indexOf("\n\n") + 2)
      .split("\n")
      .slice(1)
      .join("\n");
    const checkpoint = pasteCosignatures ? `${forged}${cosignatures}` : forged;
    return {
      answer: { ...answer, aadBound: true, proof: { ...proof, checkpoint } },
      snapshot: this.snapshot,
      key: attacker,
    };
  }

  /** An answer for `key` with `statement` signed by `signer`, appended to the honest log. */
  private bound(key: DeviceKey, statement: string, signer: Issuer): Scenario {
    const answer = answerFor(this.world, { statement, signer, key, snapshot: this.snapshot });
    return { answer: { ...answer, aadBound: true }, snapshot: this.snapshot, key };
  }
}

function ref(key: DeviceKey): EscrowKeyRef {
  return { keyId: key.keyId, algorithm: HPKE, spkiSha256: key.spkiSha256 };
}

/** The SHA-256 (hex) of a snapshot body, as answers name it. */
export function snapshotSha256(snapshot: string): string {
  return toHex(nodeSha256(new TextEncoder().encode(snapshot)));
}

/** One request as the fixture server received it. */
export interface SeenRequest {
  method: string;
  path: string;
  body: string;
}

/**
 * The dishonest service over HTTP: `POST /api/v1/keys/lookup` answers `scenario.answer` in the REST
 * envelope, `GET /kt/v1/directory/{sha256}` serves the snapshots it was given (or `directoryBody`
 * when set, to serve a wrong one), and every other request is answered 200 and recorded like these.
 */
export class FixtureServer {
  readonly requests: SeenRequest[] = [];
  scenario: Scenario | undefined;
  readonly snapshots = new Map<string, string>();
  directoryBody: string | undefined;
  private server: Server | undefined;
  url = "";

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.answer(req, res));
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }

  /** Serves `scenario` from now on (its snapshot too). */
  use(scenario: Scenario): void {
    this.scenario = scenario;
    this.snapshots.set(snapshotSha256(scenario.snapshot), scenario.snapshot);
  }

  /** The paths of every request but snapshot reads. */
  sent(): string[] {
    return this.requests
      .filter((r) => !r.path.startsWith("/kt/v1/directory/"))
      .map((r) => `${r.method} ${r.path}`);
  }

  private async answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const path = req.url ?? "";
    this.requests.push({ method: req.method ?? "", path, body: Buffer.concat(chunks).toString() });
    const directory = /^\/kt\/v1\/directory\/([0-9a-f]{64})$/.exec(path);
    if (req.method === "GET" && directory !== null) {
      const body = this.directoryBody ?? this.snapshots.get(directory[1] as string);
      res.writeHead(body === undefined ? 404 : 200, { "content-type": "application/json" });
      res.end(body ?? "");
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    const data = path === "/api/v1/keys/lookup" ? this.scenario?.answer : {};
    res.end(canonicalJson({ success: true, data: JSON.parse(JSON.stringify(data ?? {})) }));
  }
}

export { NOW };

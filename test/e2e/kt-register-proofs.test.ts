import { generateKeyPairSync, randomUUID } from "node:crypto";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  OnboardingService,
  type RegisterResponse,
  RegisterResponseSchema,
} from "../../gen/receipts/v1/onboarding_pb.js";
import {
  checkRegistration,
  createKeyTrust,
  createReceiptsClient,
  DeviceCheckError,
  generateIssuerSigner,
  type IssuerSigner,
  type KeyTrust,
  KeyVerificationError,
  keyBindingStatement,
  registerDeviceKey,
  signStatement,
} from "../../src/client/index.js";
import { panHashOf } from "../../src/domain/pan.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/types.js";
import { hashPan, post, startService, type TestService } from "../support/harness.js";
import { ORIGIN, PEPPER } from "../support/kt.js";
import { startWitnessedService, type WitnessedService } from "../support/kt-witnessed.js";

/**
 * `register` with a signed binding answers once the binding's leaf is under a checkpoint the log
 * signed, with what a look-up answers (issue 32): the binding as logged, its opening, the leaf's
 * inclusion proof under the checkpoint (cosigned by the witnesses) and the directory snapshot's
 * proof, on REST, Connect and gRPC; the device's check (`checkRegistration`) verifies the answer
 * under a trust policy. When the log does not append the leaf in time, the call answers
 * `service_unavailable` with a Retry-After (never a 500), the registration stays stored, and the same
 * request sent again answers the proofs once the leaf is appended, without logging the statement twice.
 */

const TOKEN = "kt-register-proofs-admin-token-0123456789";
const BIN = "411111";
const DAY = 86_400_000;

let cards = 0;
function card(): string {
  cards += 1;
  return hashPan(`4111117${String(cards).padStart(9, "0")}`);
}

function deviceKey(): { keyId: string; publicKey: string } {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return {
    keyId: randomUUID(),
    publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
  };
}

async function admin(svc: TestService, method: string, path: string) {
  const res = await fetch(`${svc.baseUrl}${path}`, { method, headers: { authorization: `Bearer ${TOKEN}` } });
  expect(res.status, await res.clone().text()).toBe(200);
}

/** A root signing key for the service's issuer tenant (`issuer-1`), confirmed by the operator. */
async function confirmedRoot(svc: TestService): Promise<IssuerSigner> {
  const root = await generateIssuerSigner("Ed25519");
  const added = await post(svc, "/api/v1/issuers/signing-keys", svc.issuerKey, { publicKey: root.spki });
  expect(added.status, JSON.stringify(added.body)).toBe(200);
  await admin(svc, "POST", `/admin/v1/issuers/issuer-1/signing-keys/${root.signingKeyId}/confirm`);
  return root;
}

/** A registration request for a fresh card and device key, with its binding signed by `root`. */
async function signedRegistration(
  root: IssuerSigner,
  options: { version?: number; supersedes?: string; hashedPan?: string } = {},
) {
  const hashedPan = options.hashedPan ?? card();
  const device = deviceKey();
  const statement = keyBindingStatement({
    issuer: "issuer-1",
    card: { hashedPan },
    bin: BIN,
    keyId: device.keyId,
    publicKey: device.publicKey,
    version: options.version ?? 1,
    ...(options.supersedes === undefined ? {} : { supersedes: options.supersedes }),
    notBefore: Date.now() - DAY,
  });
  const binding = await signStatement(statement, root);
  return { request: { hashedPan, ...device, cardBin: BIN, binding }, hashedPan, device, binding };
}

describe("register answers its binding's proofs", { timeout: 120_000 }, () => {
  let kt: WitnessedService;
  let svc: TestService;
  let store: Store;
  let trust: KeyTrust;
  let root: IssuerSigner;
  const headers = () => ({ "x-api-key": svc.issuerKey });

  beforeAll(async () => {
    kt = await startWitnessedService({ token: TOKEN, name: "kt-register-proofs" });
    ({ svc, store } = kt);
    trust = createKeyTrust({ policy: kt.policy, baseUrl: svc.baseUrl });
    await kt.ownBins("issuer-1", [BIN]);
    root = await confirmedRoot(svc);
  });
  afterAll(async () => {
    await kt?.close();
  });

  /** The card's leaf as the store holds it when the answer arrived (it must be there already). */
  async function leafOf(hashedPan: string) {
    return store.ktLog.lastOfSequence(`card:${panHashOf(PEPPER, hashedPan)}`);
  }

  it("REST: answers binding, opening, proof and snapshot proof, the leaf already under the checkpoint", async () => {
    const { request, hashedPan, device, binding } = await signedRegistration(root);
    const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, request);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const data = res.body.data;
    expect(data.binding).toEqual(binding);
    expect(data.opening).toMatch(/^[A-Za-z0-9+/]{22}==$/);
    const leaf = await leafOf(hashedPan);
    expect(leaf?.index).toBe(data.proof.leafIndex);
    expect(typeof data.proof.treeSize).toBe("number");
    expect(data.proof.treeSize).toBeGreaterThan(data.proof.leafIndex);
    expect(data.proof.checkpoint).toContain(`${ORIGIN}\n${data.proof.treeSize}\n`);
    expect(typeof data.directory.index).toBe("number");
    expect(data.directory.sha256).toMatch(/^[0-9a-f]{64}$/);
    const held = { binding, keyId: device.keyId, publicKey: device.publicKey };
    const verified = await checkRegistration(data, held, {
      trust,
      card: { hashedPan, bin: BIN },
      firstRegistration: true,
    });
    expect(verified).toMatchObject({ keyId: device.keyId, issuer: "issuer-1", version: 1 });
  });

  it("Connect and gRPC: the same members, and a rotation's answer proves the new binding", async () => {
    const connect = createClient(
      OnboardingService,
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
    );
    const grpc = createClient(OnboardingService, createGrpcTransport({ baseUrl: svc.baseUrl }));
    const first = await signedRegistration(root);
    const answer = await connect.register(first.request, { headers: headers() });
    expect(answer.binding).toMatchObject(first.binding);
    expect(answer.proof?.leafIndex).toBe(BigInt((await leafOf(first.hashedPan))?.index ?? -1));
    await trust.verify(answer, { hashedPan: first.hashedPan, bin: BIN });

    const rotation = await signedRegistration(root, {
      hashedPan: first.hashedPan,
      version: 2,
      supersedes: first.device.keyId,
    });
    const rotated = await grpc.register(rotation.request, { headers: headers() });
    expect(rotated.userId).toBe(answer.userId);
    expect(rotated.binding).toMatchObject(rotation.binding);
    expect(rotated.opening).not.toBe(answer.opening);
    expect(rotated.proof?.leafIndex).toBe(BigInt((await leafOf(first.hashedPan))?.index ?? -1));
    expect(rotated.directory?.sha256).toMatch(/^[0-9a-f]{64}$/);
    const held = { binding: rotation.binding, ...rotation.device };
    const verified = await checkRegistration(rotated, held, {
      trust,
      card: { hashedPan: first.hashedPan, bin: BIN },
      firstRegistration: false,
    });
    expect(verified.version).toBe(2);
  });

  const REGISTER_PATH = "/receipts.v1.OnboardingService/Register";

  /** The issuer's client on the device's behalf; `lie` rewrites the service's register answers. */
  function deviceClient(lie?: (answer: RegisterResponse) => void) {
    const seen: string[] = [];
    const client = createReceiptsClient({
      baseUrl: svc.baseUrl,
      apiKey: svc.issuerKey,
      retry: { maxAttempts: 1 },
      fetch: async (input, init) => {
        const path = new URL(String(input instanceof Request ? input.url : input)).pathname;
        seen.push(path);
        const response = await fetch(input, init);
        if (lie === undefined || path !== REGISTER_PATH || response.status !== 200) return response;
        const answer = fromBinary(RegisterResponseSchema, new Uint8Array(await response.arrayBuffer()));
        lie(answer);
        return new Response(toBinary(RegisterResponseSchema, answer), {
          status: 200,
          headers: response.headers,
        });
      },
    });
    return { client, seen };
  }

  it("device: registers its key and verifies the answer as the card's first binding", async () => {
    const { request, hashedPan } = await signedRegistration(root);
    const { client, seen } = deviceClient();
    const { registration, verified } = await registerDeviceKey(client, request, {
      trust,
      card: { hashedPan, bin: BIN },
      firstRegistration: true,
    });
    expect(registration.keyId).toBe(request.keyId);
    expect(verified).toMatchObject({ keyId: request.keyId, issuer: "issuer-1", version: 1 });
    expect(seen).toEqual([REGISTER_PATH]);
  });

  it("device: refuses to go on when its first registration is answered with version 2", async () => {
    // Someone bound the card before this device (the issuer's signing key, or another device).
    const earlier = await signedRegistration(root);
    expect((await post(svc, "/api/v1/onboarding/register", svc.issuerKey, earlier.request)).status).toBe(200);
    const { request } = await signedRegistration(root, {
      hashedPan: earlier.hashedPan,
      version: 2,
      supersedes: earlier.device.keyId,
    });
    const refused = await registerDeviceKey(deviceClient().client, request, {
      trust,
      card: { hashedPan: earlier.hashedPan, bin: BIN },
      firstRegistration: true,
    }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DeviceCheckError);
    expect((refused as DeviceCheckError).code).toBe("not_first_binding");
    expect((refused as Error).message).not.toContain(earlier.hashedPan);
  });

  it("device: refuses a lying service's register answer, each lie with its typed error", async () => {
    const other = await signedRegistration(root);
    const otherAnswer = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, other.request);
    expect(otherAnswer.status).toBe(200);
    const lies: Array<{ lie: (a: RegisterResponse) => void; error: unknown }> = [
      // Another statement (another card's binding, signed by the same issuer, logged).
      {
        lie: (a) => {
          if (a.binding) a.binding.statement = other.binding.statement;
        },
        error: { code: "statement_mismatch" },
      },
      // The attacker's key instead of the device's.
      {
        lie: (a) => {
          a.keyId = other.device.keyId;
          a.publicKey = other.device.publicKey;
        },
        error: { code: "key_mismatch" },
      },
      // A proof of another leaf, of a smaller tree, or none; a checkpoint not the log's.
      {
        lie: (a) => {
          if (a.proof) a.proof.leafIndex = BigInt(otherAnswer.body.data.proof.leafIndex);
        },
        error: KeyVerificationError,
      },
      {
        lie: (a) => {
          if (a.proof) a.proof.treeSize -= 1n;
        },
        error: KeyVerificationError,
      },
      {
        lie: (a) => {
          a.proof = undefined;
        },
        error: KeyVerificationError,
      },
      {
        lie: (a) => {
          if (a.proof)
            a.proof.checkpoint = a.proof.checkpoint.replace(/\n\n— \S+ /, "\n\n— attacker.example ");
        },
        error: KeyVerificationError,
      },
      {
        lie: (a) => {
          a.opening = otherAnswer.body.data.opening;
        },
        error: KeyVerificationError,
      },
    ];
    for (const [i, { lie, error }] of lies.entries()) {
      const { request, hashedPan } = await signedRegistration(root);
      const { client, seen } = deviceClient(lie);
      const outcome = registerDeviceKey(client, request, {
        trust,
        card: { hashedPan, bin: BIN },
        firstRegistration: true,
      });
      if (typeof error === "function") await expect(outcome, `lie ${i}`).rejects.toBeInstanceOf(error);
      else {
        await expect(outcome, `lie ${i}`).rejects.toBeInstanceOf(DeviceCheckError);
        await expect(outcome, `lie ${i}`).rejects.toMatchObject(error as object);
      }
      expect(seen).toEqual([REGISTER_PATH]);
    }
  });

  it("answers no key-directory members for a registration without a binding", async () => {
    const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan: card(),
      ...deviceKey(),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    for (const member of ["binding", "opening", "proof", "directory"]) {
      expect(res.body.data[member]).toBeUndefined();
    }
  });
});

describe("register when the log does not append the leaf in time", { timeout: 120_000 }, () => {
  let svc: TestService;
  let root: IssuerSigner;
  const store = createMemoryStore();

  beforeAll(async () => {
    // No sequencer runs: nothing is appended until the test starts one.
    svc = await startService({
      store,
      env: {
        ADMIN_TOKEN: TOKEN,
        HASHED_PAN_PEPPER: PEPPER,
        KT_SEQUENCER: "off",
        KT_LOG_WAIT_MS: "100",
        KT_SEQUENCER_POLL_MS: "20",
      },
    });
    root = await confirmedRoot(svc);
  });
  afterAll(async () => {
    await svc?.close();
  });

  /** The card's pending statements and user, as stored. */
  async function stored(hashedPan: string) {
    const cardKey = panHashOf(PEPPER, hashedPan);
    const pending = (await store.ktLog.pending(10_000)).filter(
      (p) => p.kind === "statement" && p.card?.key === cardKey,
    );
    return { user: await store.users.findByPanHash(cardKey), pending };
  }

  it("answers service_unavailable with a Retry-After on every protocol, the registration stored", async () => {
    const rest = await signedRegistration(root);
    const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, rest.request);
    expect(res.status, JSON.stringify(res.body)).toBe(503);
    expect(res.body.error?.code).toBe("service_unavailable");
    expect(res.body.error?.message).toMatch(/registration is stored.*same request again/);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(JSON.stringify(res.body)).not.toContain(rest.hashedPan);
    const headers = { "x-api-key": svc.issuerKey };
    const transports = [
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
      createGrpcTransport({ baseUrl: svc.baseUrl }),
    ];
    const registrations = [rest];
    for (const transport of transports) {
      const registration = await signedRegistration(root);
      registrations.push(registration);
      const err = await createClient(OnboardingService, transport)
        .register(registration.request, { headers })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.Unavailable);
      expect((err as ConnectError).rawMessage).toMatch(/registration is stored/);
    }
    for (const { hashedPan, device } of registrations) {
      const { user, pending } = await stored(hashedPan);
      expect(user?.activeKeyId).toBe(device.keyId);
      expect(pending).toHaveLength(1);
    }
  });

  it("answers the same request again with the proofs once appended, logging the statement once", async () => {
    const { request, hashedPan } = await signedRegistration(root);
    const first = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, request);
    expect(first.status).toBe(503);
    // Sent again while the statement is still queued: the same answer, and nothing queued twice.
    const queued = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, request);
    expect(queued.status, JSON.stringify(queued.body)).toBe(503);
    expect((await stored(hashedPan)).pending).toHaveLength(1);

    svc.app.kt.sequencer.start();
    let again = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, request);
    for (let i = 0; i < 50 && again.status === 503; i++) {
      await new Promise((r) => setTimeout(r, 100));
      again = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, request);
    }
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    const cardKey = panHashOf(PEPPER, hashedPan);
    const leaf = await store.ktLog.lastOfSequence(`card:${cardKey}`);
    expect(again.body.data).toMatchObject({
      userId: (await stored(hashedPan)).user?.userId,
      binding: request.binding,
      opening: leaf?.opening,
      proof: { leafIndex: leaf?.index },
    });
    expect(leaf?.version).toBe(1);
    // The self-check answers the same statement, opening and leaf: the retry's proofs are the log's.
    const self = await post(svc, "/api/v1/kt/self-check", svc.issuerKey, {
      recipientHashedPan: hashedPan,
      cardBin: BIN,
    });
    expect(self.body.data).toMatchObject({
      binding: again.body.data.binding,
      opening: again.body.data.opening,
      proof: { leafIndex: again.body.data.proof.leafIndex },
    });
  });
});

/**
 * What the key-directory attack scripts share (card-bindings, kt-erasure, kt-escrow-bindings,
 * kt-escrow-release, kt-root-takeover): the service to reach (`<baseUrl>`, the first argument, and
 * the operator token in ADMIN_TOKEN), HTTP calls, the held/FAILED tally and the scene the operator
 * token sets (issuer tenants with a BIN, requireBindings and a confirmed root; a merchant; device
 * keys; cards). Needs the built client library (`npm run build`).
 *
 *   const s = await attackScene("kt-escrow-release");
 *   const bank = await s.issuer("victim", { bin: s.randomBin("6"), requireBindings: true });
 *   s.expect(ok, "what held", "what was seen instead");
 *   s.finish(); // prints "n of m held", exits 0 when every check held, 1 otherwise
 */

const root = new URL("../../", import.meta.url);

/** The scene of one attack script, against the service at `process.argv[2]`. */
export async function attackScene() {
  const baseUrl = process.argv[2] ?? "http://127.0.0.1:8080";
  const adminToken = process.env.ADMIN_TOKEN ?? "";
  const client = await import(new URL("dist/src/client/index.js", root).href);
  const run = crypto.randomUUID().slice(0, 8);
  const failures = [];
  let checks = 0;

  /** One HTTP call: status, parsed JSON body (`{raw}` when not JSON) and the text; `raw` sends that text as the body. */
  async function call(method, path, headers, body, raw) {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: {
        ...(body === undefined && raw === undefined ? {} : { "content-type": "application/json" }),
        ...headers,
      },
      ...(body === undefined && raw === undefined ? {} : { body: raw ?? JSON.stringify(body) }),
    });
    const text = await res.text();
    let parsed;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = { raw: text };
    }
    return { status: res.status, body: parsed, text, headers: res.headers };
  }
  const admin = (method, path, body) => call(method, path, { authorization: `Bearer ${adminToken}` }, body);
  function must(res, what) {
    if (res.status !== 200)
      throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body.error ?? res.body)}`);
    return res.body.data;
  }
  function expect(ok, what, detail) {
    checks += 1;
    console.log(`${ok ? "held" : "FAILED"}: ${what}${ok ? "" : ` (${detail})`}`);
    if (!ok) failures.push(what);
  }
  function finish() {
    console.log(`${checks - failures.length} of ${checks} held`);
    process.exit(failures.length === 0 ? 0 : 1);
  }

  const digits = (n) => String(Math.floor(Math.random() * 10 ** n)).padStart(n, "0");
  /** An 8-digit BIN starting with `first`, random enough that runs against one service do not collide. */
  const randomBin = (first = "6") => `${first}${digits(7)}`;

  /** Confirms a new Ed25519 root for `bank` (the operator's out-of-band check): `bank.root`. */
  async function confirmRoot(bank) {
    const signer = await client.generateIssuerSigner("Ed25519");
    must(
      await call("POST", "/api/v1/issuers/signing-keys", bank.headers, { publicKey: signer.spki }),
      "root",
    );
    must(
      await admin("POST", `/admin/v1/issuers/${bank.tenant}/signing-keys/${signer.signingKeyId}/confirm`),
      "confirm",
    );
    bank.root = signer;
    return bank;
  }

  /**
   * An issuer tenant `<name>-<run>` with an API key and `bin`, optionally requireBindings (set by the
   * operator's word before the root), and a confirmed root unless `withRoot` is false.
   */
  async function issuer(name, { bin = randomBin(), requireBindings = false, withRoot = true } = {}) {
    const tenant = `${name}-${run}`;
    const apiKey = must(
      await admin("POST", "/admin/v1/api-keys", { tenant, role: "issuer", tier: "enterprise" }),
      "key",
    ).apiKey;
    must(await admin("PUT", `/admin/v1/issuers/${tenant}/bins`, { bins: [bin] }), "BIN");
    if (requireBindings)
      must(
        await admin("PUT", `/admin/v1/issuers/${tenant}/require-bindings`, { requireBindings: true }),
        "requireBindings",
      );
    const bank = { tenant, apiKey, bin, headers: { "x-api-key": apiKey } };
    return withRoot ? confirmRoot(bank) : bank;
  }

  /** A merchant tenant's API key. */
  async function merchant(name) {
    return must(
      await admin("POST", "/admin/v1/api-keys", {
        tenant: `${name}-${run}`,
        role: "merchant",
        tier: "enterprise",
      }),
      "merchant",
    ).apiKey;
  }

  /** A device's P-256 key: its id and base64 SPKI. */
  async function deviceKey() {
    const pair = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, ["deriveBits"]);
    const publicKey = Buffer.from(await crypto.subtle.exportKey("spki", pair.publicKey)).toString("base64");
    return { keyId: crypto.randomUUID(), publicKey };
  }
  const p256 = async () => (await deviceKey()).publicKey;
  const hashedPan = () => Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");

  return {
    baseUrl,
    adminToken,
    client,
    run,
    call,
    admin,
    must,
    expect,
    finish,
    digits,
    randomBin,
    issuer,
    confirmRoot,
    merchant,
    deviceKey,
    p256,
    hashedPan,
  };
}

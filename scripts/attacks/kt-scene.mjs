/**
 * What the key-directory attack scripts share (card-bindings, kt-erasure, kt-escrow-bindings,
 * kt-escrow-release, kt-root-takeover; and, without the client library, bin-claims, card-aliases and
 * plaintext-intake): the service to reach (`<baseUrl>`, the first argument, and the operator token in
 * ADMIN_TOKEN), HTTP calls, the held/FAILED tally and the scene the operator token sets (issuer
 * tenants with a BIN, requireBindings and a confirmed root; a merchant; API keys; device keys; cards;
 * a receipt). Needs the built client library (`npm run build`) unless called with `client: false`.
 *
 *   const s = await attackScene("kt-escrow-release");
 *   const bank = await s.issuer("victim", { bin: s.randomBin("6"), requireBindings: true });
 *   s.expect(ok, "what held", "what was seen instead");
 *   s.finish(); // prints "n of m held", exits 0 when every check held, 1 otherwise
 */

const root = new URL("../../", import.meta.url);

/**
 * The scene of one attack script, against the service at `process.argv[2]` (or RECEIPTS_URL). With
 * `client: false` it loads no client library (`client` is undefined; a script that needs only fetch).
 */
export async function attackScene({ client: withClient = true } = {}) {
  const baseUrl = process.argv[2] ?? process.env.RECEIPTS_URL ?? "http://127.0.0.1:8080";
  const adminToken = process.env.ADMIN_TOKEN ?? "";
  const client = withClient ? await import(new URL("dist/src/client/index.js", root).href) : undefined;
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

  /** A new API key of `tenant` with `role` (default tier), as the `x-api-key` header. */
  async function apiKeyHeaders(tenant, role) {
    const data = must(await admin("POST", "/admin/v1/api-keys", { tenant, role }), `api key for ${tenant}`);
    return { "x-api-key": data.apiKey };
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
  /** A random 29-character PAR. */
  const par = () =>
    Array.from(
      crypto.getRandomValues(new Uint8Array(29)),
      (b) => "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"[b % 36],
    ).join("");
  /** A one-coffee receipt of the shop `shop-<run>` for `card` (its reference members), with `extra`. */
  const receipt = (card, extra = {}) => ({
    receiptId: `r-${crypto.randomUUID().slice(0, 12)}`,
    merchantId: `shop-${run}`,
    merchantName: "Attack Cafe",
    transactionId: `t-${crypto.randomUUID().slice(0, 12)}`,
    transactionDate: "2026-11-21T09:30:00Z",
    currency: "EUR",
    items: [{ lineItemId: "1", name: "Coffee", quantity: 1, unitPrice: 300, totalPrice: 300 }],
    totalAmount: 300,
    ...card,
    ...extra,
  });

  /** Retries `probe` while the service answers 503 (a statement not under a checkpoint yet). */
  async function settled(probe) {
    for (let i = 0; i < 100; i++) {
      const res = await probe();
      if (res.status !== 503) return res;
      await new Promise((r) => setTimeout(r, 100));
    }
    return probe();
  }

  /** Each receipt's AES key re-wrapped on the bank's side from its escrow key to `to` (needs the client). */
  async function rewrapped(receipts, escrowPrivate, to) {
    const out = [];
    for (const r of receipts) {
      const keyBundle = await client.rewrapKeyBundle(r, escrowPrivate, {
        keyId: to.keyId,
        publicKey: to.publicKey,
      });
      out.push({ merchantId: r.merchantId, receiptId: r.receiptId, keyBundle });
    }
    return out;
  }

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
    apiKeyHeaders,
    deviceKey,
    p256,
    hashedPan,
    par,
    receipt,
    settled,
    rewrapped,
  };
}

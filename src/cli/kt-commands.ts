import { readFileSync, writeFileSync } from "node:fs";
import {
  COSIGNATURE_ED25519,
  formatVkey,
  isKeyName,
  NOTE_ED25519,
  type NoteKey,
  ORIGIN_SUFFIX,
  parseVkey,
} from "../kt/note.js";
import { formatNoteSkey, generateNoteSigner, parseNoteSkey } from "../kt/note-keys.js";
import { CommandConfigError, parse, UsageError } from "./admin-commands.js";
import { startWitnessServer } from "./witness-server.js";

/**
 * The command line's key-transparency commands (docs/key-transparency.md): `kt keygen` makes the log's key
 * (`KT_LOG_PRIVATE_KEY`), `witness keygen` a witness's, and `witness serve` runs a witness, which a
 * bank (or anyone merchants trust) runs beside the service's log.
 */

export const KT_HELP = {
  kt: `Usage: receipts kt keygen --host <host> --out <file> [--json]
       receipts kt monitor ... (an issuer's monitor of the log: "receipts kt monitor --help")

Makes the key log's signing key, named <host>/receipts/kt/v1 (the log's origin, the host merchants
reach the service at). The private key goes to --out (a new file of mode 600), which
KT_LOG_PRIVATE_KEY_FILE names; the verifier key (vkey) printed is what trust policies and witnesses
are given.`,
  witness: `Usage: receipts witness keygen --name <name> --out <file> [--json]
       receipts witness serve --key <file> --state <file> --log <vkey> [--log <vkey> ...]
                              [--port <port>] [--host <address>]

keygen makes a witness key named <name> (e.g. witness.bank-a.example) and prints its vkey, which goes
into the service's WITNESS_URLS and into merchants' trust policies.

serve runs a C2SP tlog-witness (POST /add-checkpoint) for the logs whose vkeys --log gives: it
cosigns a checkpoint only if it extends the last one it cosigned for that log (a consistency proof),
and never two roots for one size. Its state lives in --state (created on the first cosignature);
keep it with the key, and never run two witnesses on one state file. Port 8090 and 127.0.0.1 by
default.`,
} as const;

/** `kt keygen`. */
export async function ktCommand(
  command: string | undefined,
  args: string[],
  out: NodeJS.WritableStream,
): Promise<void> {
  if (command !== "keygen")
    throw new UsageError('Unknown kt command: try "receipts kt keygen" or "receipts kt monitor".');
  const { values } = parse(args, {
    host: { type: "string" },
    out: { type: "string" },
    json: { type: "boolean", default: false },
  });
  const host = String(values.host ?? "");
  if (host === "" || !isKeyName(`${host}${ORIGIN_SUFFIX}`))
    throw new UsageError("kt keygen needs --host <host>.");
  const signer = generateNoteSigner(`${host}${ORIGIN_SUFFIX}`, NOTE_ED25519);
  writeKey(values.out, formatNoteSkey(signer));
  emitKey(out, values.json, signer.key, values.out);
}

/** `witness keygen|serve`. */
export async function witnessCommand(
  command: string | undefined,
  args: string[],
  out: NodeJS.WritableStream,
): Promise<void> {
  if (command === "keygen") {
    const { values } = parse(args, {
      name: { type: "string" },
      out: { type: "string" },
      json: { type: "boolean", default: false },
    });
    const name = String(values.name ?? "");
    if (!isKeyName(name)) throw new UsageError("witness keygen needs --name <name> (no spaces or '+').");
    const signer = generateNoteSigner(name, COSIGNATURE_ED25519);
    writeKey(values.out, formatNoteSkey(signer));
    emitKey(out, values.json, signer.key, values.out);
    return;
  }
  if (command === "serve") return serve(args, out);
  throw new UsageError('Unknown witness command: try "receipts witness keygen" or "receipts witness serve".');
}

async function serve(args: string[], out: NodeJS.WritableStream): Promise<void> {
  const { values } = parse(args, {
    key: { type: "string" },
    state: { type: "string" },
    log: { type: "string", multiple: true },
    port: { type: "string", default: "8090" },
    host: { type: "string", default: "127.0.0.1" },
  });
  if (values.key === undefined || values.state === undefined || (values.log ?? []).length === 0) {
    throw new UsageError("witness serve needs --key <file>, --state <file> and at least one --log <vkey>.");
  }
  let keyText: string;
  try {
    keyText = readFileSync(values.key, "utf8");
  } catch {
    throw new CommandConfigError(`The witness key file cannot be read (${values.key}).`);
  }
  const parsed = parseNoteSkey(keyText, [COSIGNATURE_ED25519]);
  if (!parsed.ok) throw new CommandConfigError(`The witness key is not a witness key: ${parsed.reason}.`);
  const logs: Record<string, NoteKey[]> = {};
  for (const vkey of values.log ?? []) {
    const key = parseVkey(vkey);
    if (key === undefined || key.type !== NOTE_ED25519)
      throw new UsageError(`--log ${vkey.slice(0, 80)} is not a log's vkey.`);
    logs[key.name] = [...(logs[key.name] ?? []), key];
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new UsageError("--port must be 0-65535.");
  const running = await startWitnessServer({
    config: { signers: [parsed.signer], logs },
    statePath: values.state,
    port,
    host: String(values.host),
  });
  out.write(`witness ${formatVkey(parsed.signer.key)} listening on ${running.url}/add-checkpoint\n`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  await running.close();
}

/** Writes a private key to a new file of mode 600 (an existing file is never overwritten). */
function writeKey(path: string | undefined, skey: string): void {
  if (path === undefined) throw new UsageError("Give --out <file> for the private key.");
  try {
    writeFileSync(path, `${skey}\n`, { mode: 0o600, flag: "wx" });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? "error";
    throw new CommandConfigError(
      `Cannot write ${path} (${code}); an existing key file is never overwritten.`,
    );
  }
}

/** Prints the new key's vkey (with `--json`: its name, vkey and private key file). */
function emitKey(out: NodeJS.WritableStream, json: unknown, key: NoteKey, path: string | undefined): void {
  const vkey = formatVkey(key);
  if (json === true) out.write(`${JSON.stringify({ name: key.name, vkey, privateKeyFile: path })}\n`);
  else out.write(`${vkey}\n`);
}

import { join } from "node:path";
import { startWitnessServer } from "../../src/cli/witness-server.js";
import { COSIGNATURE_ED25519, formatVkey, type NoteKey } from "../../src/kt/note.js";
import { generateNoteSigner } from "../../src/kt/note-keys.js";

/** A witness as a trust policy lists it, and as `WITNESS_URLS` names it. */
export interface StartedWitness {
  url: string;
  vkey: string;
  organisation: string;
}

/**
 * Starts one witness server (the command line's, on a free port) per entry of `witnesses`, each with a
 * fresh cosignature key, cosigning the log `origin` signed with `logKey`, its state in `dir`; the
 * servers' closing goes into `closers`.
 */
export async function startWitnesses(
  origin: string,
  logKey: NoteKey,
  dir: string,
  closers: Array<() => Promise<unknown>>,
  witnesses: ReadonlyArray<{ name: string; organisation: string }>,
): Promise<StartedWitness[]> {
  const started: StartedWitness[] = [];
  for (const w of witnesses) {
    const signer = generateNoteSigner(w.name, COSIGNATURE_ED25519);
    const running = await startWitnessServer({
      config: { signers: [signer], logs: { [origin]: [logKey] } },
      statePath: join(dir, `${w.name}.state`),
      port: 0,
    });
    closers.push(() => running.close());
    started.push({ url: running.url, vkey: formatVkey(signer.key), organisation: w.organisation });
  }
  return started;
}

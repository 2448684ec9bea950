import type { Logger } from "pino";
import { NOTE_ED25519, type NoteSigner, ORIGIN_SUFFIX } from "../../kt/note.js";
import { generateNoteSigner, parseNoteSkey } from "../../kt/note-keys.js";

/**
 * The log's signer from its configured key (`KT_LOG_PRIVATE_KEY`, checked by the configuration), or,
 * without one (development only: production and MongoDB refuse to start without it), a key made for
 * this process, named `localhost/receipts/kt/v1`: its checkpoints mean nothing after a restart.
 */
export function ktLogSigner(text: string | undefined, logger: Pick<Logger, "warn">): NoteSigner {
  if (text === undefined) {
    logger.warn(
      "KT_LOG_PRIVATE_KEY not set: the key log signs with a key made for this process (development only)",
    );
    return generateNoteSigner(`localhost${ORIGIN_SUFFIX}`, NOTE_ED25519);
  }
  const parsed = parseNoteSkey(text, [NOTE_ED25519]);
  if (!parsed.ok) throw new Error(`KT_LOG_PRIVATE_KEY: ${parsed.reason}`);
  return parsed.signer;
}

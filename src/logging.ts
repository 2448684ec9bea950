import { type Logger, pino } from "pino";

/**
 * Paths removed from every log line (section 14). Bodies are never logged whole, but a careless
 * `log.info({ req })` must still not leak: secrets are redacted by name wherever they appear.
 */
export const REDACT_PATHS = [
  "privateKey",
  "*.privateKey",
  "escrowPrivateKey",
  "*.escrowPrivateKey",
  "hashedPanPepper",
  "*.hashedPanPepper",
  "tokenId",
  "*.tokenId",
  "accessTokenId",
  "*.accessTokenId",
  "clientSecret",
  "*.clientSecret",
  "hashedPan",
  "*.hashedPan",
  "recipientHashedPan",
  "*.recipientHashedPan",
  "par",
  "*.par",
  "recipientPar",
  "*.recipientPar",
  "panHash",
  "*.panHash",
  "apiKey",
  "*.apiKey",
  'headers["x-api-key"]',
  '*.headers["x-api-key"]',
  'headers["x-receipt-signature"]',
  "receipt",
  "*.receipt",
  "plaintext",
  "*.plaintext",
];

/** Creates the root logger: pino JSON lines to stdout (or `destination`) with secrets redacted. */
export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    redact: { paths: REDACT_PATHS, censor: "[redacted]" },
    base: { service: "receipts" },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return destination ? pino(options, destination) : pino(options);
}

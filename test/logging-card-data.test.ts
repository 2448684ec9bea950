import { describe, expect, it } from "vitest";
import { createLogger } from "../src/logging.js";

/**
 * Card references are card data: a hashed PAN, a PAR and the keyed `panHash` the
 * service stores a card by are removed from a log line by name, at the top level and one level down,
 * even when a careless call logs a request or a record whole.
 */
describe("log redaction of card references", () => {
  it("removes hashed PANs, PARs and panHash from every line", () => {
    const lines: string[] = [];
    const logger = createLogger("info", { write: (line: string) => lines.push(line) });
    const card = {
      hashedPan: "a".repeat(64),
      recipientHashedPan: "b".repeat(64),
      par: "PAR0000000000000000000000001",
      recipientPar: "PAR0000000000000000000000002",
      panHash: "c".repeat(64),
    };
    logger.info(card, "top level");
    logger.info({ req: card, user: { panHash: card.panHash } }, "one level down");
    expect(lines).toHaveLength(2);
    for (const value of Object.values(card)) {
      expect(lines.filter((line) => line.includes(value))).toEqual([]);
    }
    expect(lines[0]).toContain("[redacted]");
  });
});

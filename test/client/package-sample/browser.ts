/**
 * A browser page's use of the package (test/client/package.test.ts type-checks it with the browser's
 * types and none of Node's, and bundles it for the browser): open a listed receipt on the device.
 */
import { createReceiptsClient, type KeyRing, openListing } from "receipt-encryption-client";

export async function showReceipts(
  baseUrl: string,
  apiKey: string,
  userId: string,
  ring: KeyRing,
): Promise<string[]> {
  const client = createReceiptsClient({ baseUrl, apiKey });
  const page = await client.listReceipts(userId);
  const opened = await openListing(page.receipts, ring);
  return opened.map((o) => (o.ok ? (o.receipt.merchantName ?? "") : o.error.code));
}

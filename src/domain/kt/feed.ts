import { Violations } from "../../errors.js";
import type { KtLeafRecord } from "../../store/kt-types.js";
import type { ApiKeyRecord } from "../../store/types.js";
import type { DomainDeps } from "../deps.js";

/**
 * The issuer's feed of its own leaves in the key log (docs/key-transparency.md, `GET /api/v1/kt/entries`):
 * what its monitor needs to open every leaf signed by its keys, the statement as stored (cardRef removed),
 * the opening and the user. Only the caller's tenant's leaves; the page token is a position in the log,
 * which reveals nothing the caller may not read.
 */

/** Entries per page by default, and at most. */
export const FEED_PAGE = { default: 100, max: 1_000 } as const;

/** One opened leaf, as the RPC answers it. */
export interface FeedEntry {
  index: bigint;
  statementWithoutCardRef: string;
  opening: string;
  signingKeyId: string;
  userId: string;
  erased: boolean;
}

const TOKEN = /^ktf_(0|[1-9][0-9]{0,15})$/;

/** The caller's leaves after `after` (or after the page token's position), at most `pageSize`. */
export async function listKtEntries(
  deps: Pick<DomainDeps, "store">,
  principal: ApiKeyRecord,
  input: { after?: bigint | undefined; pageSize: number; pageToken: string },
): Promise<{ entries: FeedEntry[]; nextPageToken: string }> {
  const v = new Violations();
  let afterIndex = -1;
  if (input.pageToken !== "") {
    const m = TOKEN.exec(input.pageToken);
    if (m === null) v.add("pageToken", "is not a page token of this feed");
    else afterIndex = Number(m[1]);
  } else if (input.after !== undefined) {
    if (input.after < 0n || input.after > BigInt(Number.MAX_SAFE_INTEGER)) {
      v.add("after", "must be a leaf index, 0 or more");
    } else afterIndex = Number(input.after);
  }
  if (input.pageSize < 0 || input.pageSize > FEED_PAGE.max) {
    v.add("pageSize", `must be between 1 and ${FEED_PAGE.max} (0: ${FEED_PAGE.default})`);
  }
  v.throwIfAny();
  const limit = input.pageSize === 0 ? FEED_PAGE.default : input.pageSize;
  const leaves = await deps.store.ktLog.leavesOfTenant(principal.tenantId, afterIndex, limit);
  const last = leaves.at(-1);
  return {
    entries: leaves.map(entryOf),
    nextPageToken: leaves.length === limit && last !== undefined ? `ktf_${last.index}` : "",
  };
}

function entryOf(leaf: KtLeafRecord): FeedEntry {
  const erased = leaf.statement === undefined || leaf.opening === undefined;
  return {
    index: BigInt(leaf.index),
    statementWithoutCardRef: erased ? "" : Buffer.from(leaf.statement as string, "utf8").toString("base64"),
    opening: erased ? "" : (leaf.opening as string),
    signingKeyId: erased ? "" : (leaf.signingKeyId ?? ""),
    userId: erased ? "" : (leaf.userId ?? ""),
    erased,
  };
}

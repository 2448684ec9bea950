import type { EraseStep, StoreFaults } from "./contract-erase-revocations.js";
import type { FakeMongo } from "./fake-mongo/index.js";

/** The fake driver's operation that each erase step sends (`src/store/mongo/users.ts`, `kt-docs.ts`). */
const OPERATIONS: Record<EraseStep, string> = {
  "pending insert": "insertOne ktPending",
  "user delete": "deleteOne users",
  "keys delete": "deleteMany keys",
};

/**
 * Fault injection on the fake driver (database `dbName`): the next operation of a step throws, as a
 * dropped connection; and a view of what is committed before each operation.
 */
export function fakeFaults(fake: FakeMongo, dbName: string): StoreFaults {
  const committed = (collection: string, field: string) =>
    new Set([...fake.database(dbName).collection(collection).docs.values()].map((doc) => String(doc[field])));
  return {
    failNext(step) {
      let fired = false;
      fake.onOperation = (name) => {
        if (fired || name !== OPERATIONS[step]) return;
        fired = true;
        throw new Error(`injected: ${name} failed (the connection dropped)`);
      };
      return { fired: () => fired };
    },
    clear() {
      fake.onOperation = undefined;
    },
    watch(see) {
      fake.onOperation = () =>
        see({ userIds: committed("users", "userId"), pendingIds: committed("ktPending", "_id") });
      return () => {
        fake.onOperation = undefined;
      };
    },
  };
}

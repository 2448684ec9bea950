export { keyOf } from "./bson.js";
export {
  type ClusterDeclarations,
  ClusterPolicyError,
  type ShardKeyPattern,
  type TransactionRecord,
} from "./cluster.js";
export { FakeMongo, type FakeMongoOptions, type RecordedFilter, type RecordedQuery } from "./server.js";

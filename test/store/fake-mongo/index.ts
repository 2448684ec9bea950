export { keyOf } from "./bson.js";
export { FakeMongo, type FakeMongoOptions, type RecordedQuery } from "./server.js";

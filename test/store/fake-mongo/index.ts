export { FakeMongo, type FakeMongoOptions, type RecordedQuery } from "./server.js";

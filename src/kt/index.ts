/**
 * The key-transparency library (docs/key-transparency.md), for the service and the
 * client library alike. Node's native engine is not exported here: the server imports
 * `./node-engine.js` itself, so a browser bundle of this entry point never meets a `node:` module.
 */
export * from "./bytes.js";
export * from "./card-rules.js";
export * from "./directory.js";
export * from "./hash.js";
export * from "./json.js";
export * from "./leaves.js";
export * from "./merkle.js";
export * from "./monitor.js";
export * from "./note.js";
export * from "./policy.js";
export * from "./signatures.js";
export * from "./statements.js";
export * from "./tiles.js";
export * from "./verify.js";
export type * from "./wire.js";
export * from "./witness.js";

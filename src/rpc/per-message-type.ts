import type { DescMessage } from "@bufbuild/protobuf";

/**
 * `compile` run once per message type: the first call for a descriptor compiles, later calls get the
 * same result. The compiled codecs (REST JSON and protobuf binary, in and out) keep their per-type
 * functions this way.
 */
export function perMessageType<T>(compile: (desc: DescMessage) => T): (desc: DescMessage) => T {
  const compiled = new WeakMap<DescMessage, { value: T }>();
  return (desc) => {
    let entry = compiled.get(desc);
    if (entry === undefined) {
      entry = { value: compile(desc) };
      compiled.set(desc, entry);
    }
    return entry.value;
  };
}

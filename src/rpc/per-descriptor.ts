import type { DescField, DescMessage } from "@bufbuild/protobuf";

/**
 * `compile` run once per descriptor (a message type, or one of its fields): the first call for a
 * descriptor compiles, later calls get the same result. The compiled codecs (REST JSON and protobuf
 * binary, in and out) keep their per-type and per-field functions this way.
 */
export function perDescriptor<D extends DescMessage | DescField, T>(compile: (desc: D) => T): (desc: D) => T {
  const compiled = new WeakMap<D, { value: T }>();
  return (desc) => {
    let entry = compiled.get(desc);
    if (entry === undefined) {
      entry = { value: compile(desc) };
      compiled.set(desc, entry);
    }
    return entry.value;
  };
}

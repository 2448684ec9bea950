// A protoc plugin (run by `buf generate`, see buf.gen.yaml) that carries the proto comments into the
// generated code. protoc-gen-es embeds descriptors without their source info, so without this the
// service's OpenAPI document and reference page could not see a single comment.
//
// For each proto package of ours (`receipts.*`) it writes `<package path>/docs.ts` with:
//   - `comments`: the leading comment of every service, RPC, message, field, enum and enum value, by
//     full name (`receipts.v1.KeysService.GrantAccess`, `receipts.v1.Receipt.receipt_id`,
//     `receipts.v1.Status.ACTIVE`), one leading space per line removed;
//   - `examples`: the example request and response of each RPC, taken out of its comment;
//   - `required`: the request fields whose comment begins with `Required.`: the service refuses them
//     empty (the word is taken out of the comment; the reference marks the field instead).
//
// An RPC declares its examples in its comment, after the description, each as a line that says
// `Example request:` or `Example response:` followed by the message in the proto JSON mapping, up
// to the next blank line (or the next example, or the end of the comment):
//
//   // Grants a 2-3 minute token to decrypt a user's receipts.
//   //
//   // Example request:
//   // {"userId": "usr_9d2f...", "keyId": "6f1c..."}
//   //
//   // Example response:
//   // {"tokenId": "tok_...", ...}
//
// Text that does not parse as JSON fails the generation with the file and line. Whether every RPC
// has both examples, whether they are valid messages, and whether the service really refuses each
// required field empty, is for the tests (test/openapi/examples, test/e2e/examples).
//
// "Required." is a comment convention rather than google.api.field_behavior: that option adds
// google/api/field_behavior.proto to every reflected descriptor set, and grpc-js-reflection-client
// (through protobufjs's descriptor round trip) then fails with "duplicate id 1052".
import { create, createFileRegistry, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  CodeGeneratorRequestSchema,
  CodeGeneratorResponse_Feature,
  CodeGeneratorResponse_FileSchema,
  CodeGeneratorResponseSchema,
  FileDescriptorSetSchema,
} from "@bufbuild/protobuf/wkt";

/** FileDescriptorProto / DescriptorProto / ServiceDescriptorProto / EnumDescriptorProto field numbers. */
const FILE_MESSAGE = 4;
const FILE_ENUM = 5;
const FILE_SERVICE = 6;
const MESSAGE_FIELD = 2;
const MESSAGE_NESTED = 3;
const MESSAGE_ENUM = 4;
const SERVICE_METHOD = 2;
const ENUM_VALUE = 2;

const EXAMPLE_LINE = /^Example (request|response):\s*$/;
const REQUIRED = /^Required\.\s*/;

/**
 * The full name of every element of `file` by its source path (`"6,0,2,1"`), from the descriptors.
 * @param {import("@bufbuild/protobuf").DescFile} file
 * @returns {Map<string, {name: string, kind: string}>}
 */
function elementsByPath(file) {
  const out = new Map();
  const put = (path, name, kind) => out.set(path.join(","), { name, kind });
  const enumOf = (desc, path) => {
    put(path, desc.typeName, "enum");
    desc.values.forEach((value, i) => {
      put([...path, ENUM_VALUE, i], `${desc.typeName}.${value.name}`, "enum_value");
    });
  };
  const messageOf = (desc, path) => {
    put(path, desc.typeName, "message");
    desc.proto.field.forEach((field, i) => {
      put([...path, MESSAGE_FIELD, i], `${desc.typeName}.${field.name}`, "field");
    });
    desc.nestedMessages.forEach((nested) => {
      messageOf(nested, [...path, MESSAGE_NESTED, desc.proto.nestedType.indexOf(nested.proto)]);
    });
    desc.nestedEnums.forEach((nested) => {
      enumOf(nested, [...path, MESSAGE_ENUM, desc.proto.enumType.indexOf(nested.proto)]);
    });
  };
  file.messages.forEach((desc, i) => {
    messageOf(desc, [FILE_MESSAGE, i]);
  });
  file.enums.forEach((desc, i) => {
    enumOf(desc, [FILE_ENUM, i]);
  });
  file.services.forEach((service, i) => {
    put([FILE_SERVICE, i], service.typeName, "service");
    service.methods.forEach((method, j) => {
      put([FILE_SERVICE, i, SERVICE_METHOD, j], `${service.typeName}.${method.name}`, "rpc");
    });
  });
  return out;
}

/**
 * A comment as written (one leading space per line removed, trailing spaces and surrounding blank
 * lines trimmed).
 * @param {string} text
 */
function clean(text) {
  return text
    .split("\n")
    .map((line) => (line.startsWith(" ") ? line.slice(1) : line).trimEnd())
    .join("\n")
    .trim();
}

/**
 * Splits an RPC's comment into its description and its examples.
 * @param {string} comment
 * @param {string} where `file:line` of the comment, for errors
 * @returns {{description: string, examples: Record<string, unknown>}}
 */
function splitExamples(comment, where) {
  const lines = comment.split("\n");
  const kept = [];
  const examples = {};
  for (let i = 0; i < lines.length; i++) {
    const match = EXAMPLE_LINE.exec(lines[i] ?? "");
    if (match === null) {
      kept.push(lines[i]);
      continue;
    }
    const kind = match[1];
    const body = [];
    while (i + 1 < lines.length && lines[i + 1]?.trim() !== "" && !EXAMPLE_LINE.test(lines[i + 1] ?? "")) {
      body.push(lines[++i]);
    }
    if (examples[kind] !== undefined) throw new Error(`${where}: a second "Example ${kind}:"`);
    try {
      examples[kind] = JSON.parse(body.join("\n"));
    } catch (err) {
      throw new Error(`${where}: the example ${kind} is not JSON: ${err.message}`);
    }
  }
  return { description: kept.join("\n").trim(), examples };
}

/**
 * The docs module of one proto package.
 * @param {import("@bufbuild/protobuf").DescFile[]} files
 */
function docsModule(files) {
  const comments = {};
  const examples = {};
  const required = [];
  for (const file of files) {
    const elements = elementsByPath(file);
    for (const location of file.proto.sourceCodeInfo?.location ?? []) {
      const element = elements.get(location.path.join(","));
      const text = clean(location.leadingComments ?? "");
      if (element === undefined || text === "") continue;
      if (element.kind === "field" && REQUIRED.test(text)) {
        required.push(element.name);
        const rest = text.replace(REQUIRED, "");
        if (rest !== "") comments[element.name] = rest;
        continue;
      }
      if (element.kind !== "rpc") {
        comments[element.name] = text;
        continue;
      }
      const where = `${file.proto.name}:${(location.span[0] ?? 0) + 1}`;
      const split = splitExamples(text, where);
      if (split.description !== "") comments[element.name] = split.description;
      if (Object.keys(split.examples).length > 0) examples[element.name] = split.examples;
    }
  }
  const sorted = (record) => Object.fromEntries(Object.entries(record).sort(([a], [b]) => (a < b ? -1 : 1)));
  return [
    `// @generated by scripts/protoc-gen-docs.mjs from the comments of ${files.map((f) => f.proto.name).join(", ")}`,
    "// DO NOT EDIT: change the proto comments and run `npm run generate`.",
    "",
    'import type { JsonValue } from "@bufbuild/protobuf";',
    "",
    "/** The leading comment of each element by full name, RPC comments without their examples. */",
    `export const comments: Readonly<Record<string, string>> = ${JSON.stringify(sorted(comments), null, 2)};`,
    "",
    "/** Each RPC's example request and response messages, in the proto JSON mapping, by full name. */",
    "export const examples: Readonly<Record<string, { request?: JsonValue; response?: JsonValue }>> = " +
      `${JSON.stringify(sorted(examples), null, 2)};`,
    "",
    "/** The request fields the service refuses empty (comment `Required.`), by full name. */",
    `export const required: ReadonlySet<string> = new Set(${JSON.stringify(required.sort(), null, 2)});`,
    "",
  ].join("\n");
}

function main(input) {
  const request = fromBinary(CodeGeneratorRequestSchema, input);
  const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: request.protoFile }));
  const byPackage = new Map();
  for (const name of request.fileToGenerate) {
    const file = registry.getFile(name);
    if (file === undefined || !file.proto.package.startsWith("receipts.")) continue;
    byPackage.set(file.proto.package, [...(byPackage.get(file.proto.package) ?? []), file]);
  }
  const response = create(CodeGeneratorResponseSchema, {
    supportedFeatures: BigInt(CodeGeneratorResponse_Feature.PROTO3_OPTIONAL),
  });
  try {
    for (const [pkg, files] of byPackage) {
      const name = `${pkg.replaceAll(".", "/")}/docs.ts`;
      response.file.push(create(CodeGeneratorResponse_FileSchema, { name, content: docsModule(files) }));
    }
  } catch (err) {
    response.error = err.message;
  }
  return toBinary(CodeGeneratorResponseSchema, response);
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
process.stdout.write(main(new Uint8Array(Buffer.concat(chunks))));

import { ScalarType } from "@bufbuild/protobuf";

/**
 * Whether a protobuf scalar type is a 64-bit integer: what protobuf JSON renders as a string and the
 * service's REST JSON (and the signed form of a receipt) renders as a number (spec section 3).
 */
export function is64BitInteger(type: ScalarType): boolean {
  return (
    type === ScalarType.INT64 ||
    type === ScalarType.UINT64 ||
    type === ScalarType.SINT64 ||
    type === ScalarType.FIXED64 ||
    type === ScalarType.SFIXED64
  );
}

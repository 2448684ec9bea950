import { readFileSync } from "node:fs";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { SANDBOX_NONCES } from "../../src/domain/gateways/sandbox-b.js";
import { ERRORS } from "../../src/errors.js";

/**
 * The README's error table (`| code | HTTP | gRPC | when |`) is what users read; the registry in
 * src/errors.ts is what the service answers. They must name the same codes with the same HTTP status
 * and gRPC code, row for row.
 */

const README = readFileSync(new URL("../../README.md", import.meta.url), "utf8");

interface Row {
  code: string;
  http: number;
  grpc: string;
}

/** The rows of the README's error table, in order; fails when there is not exactly one such table. */
function readmeErrorTable(markdown: string): Row[] {
  const lines = markdown.split("\n");
  const cells = (line: string) =>
    line
      .trim()
      .replace(/^\||\|$/g, "")
      .split("|")
      .map((cell) => cell.trim());
  const headers = lines
    .map((line, index) => ({ line, index }))
    .filter(({ line }) => /^\|/.test(line.trim()) && cells(line).join("|") === "code|HTTP|gRPC|when");
  expect(headers, "one | code | HTTP | gRPC | when | table in README.md").toHaveLength(1);
  const rows: Row[] = [];
  for (let i = (headers[0]?.index ?? 0) + 2; i < lines.length && /^\|/.test(lines[i]?.trim() ?? ""); i++) {
    const [code, http, grpc] = cells(lines[i] as string);
    rows.push({ code: (code ?? "").replace(/^`|`$/g, ""), http: Number(http), grpc: grpc ?? "" });
  }
  return rows;
}

/** A Connect code as gRPC writes it: `Code.InvalidArgument` is INVALID_ARGUMENT. */
function grpcName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

describe("the README's error table", () => {
  const rows = readmeErrorTable(README);

  it("has one row per registered error code, none missing, none extra, none twice", () => {
    const codes = rows.map((row) => row.code);
    expect(new Set(codes).size).toBe(codes.length);
    expect([...codes].sort()).toEqual(Object.keys(ERRORS).sort());
  });

  it("gives each code the registry's HTTP status and gRPC code", () => {
    const registry = Object.entries(ERRORS).map(([code, entry]) => ({
      code,
      http: entry.http,
      grpc: grpcName(entry.grpc),
    }));
    const byCode = (a: Row, b: Row) => a.code.localeCompare(b.code);
    expect([...rows].sort(byCode)).toEqual(registry.sort(byCode));
  });

  it("reads gRPC names as gRPC spells them", () => {
    expect(grpcName(Code.InvalidArgument)).toBe("INVALID_ARGUMENT");
    expect(grpcName(Code.FailedPrecondition)).toBe("FAILED_PRECONDITION");
    expect(grpcName(Code.Unavailable)).toBe("UNAVAILABLE");
  });
});

describe("the README's sandbox cards", () => {
  it("lists every sandbox nonce of gateway_b with the outcome it triggers, and no other", () => {
    const at = README.indexOf("| cardNonce ");
    expect(at, "a | cardNonce | outcome | table in README.md").toBeGreaterThan(0);
    const lines = README.slice(at).split("\n");
    const end = lines.findIndex((line) => !line.trim().startsWith("|"));
    const rows = lines.slice(2, end).map((line) => line.split("|").map((cell) => cell.trim()));
    const listed = Object.fromEntries(
      rows.map(([, nonce, outcome]) => [
        (nonce ?? "").replace(/`/g, ""),
        outcome === "approved" ? "approved" : /`([a-z_]+)`$/.exec(outcome ?? "")?.[1],
      ]),
    );
    expect(listed).toEqual(SANDBOX_NONCES);
    for (const [, , outcome] of rows) {
      if (outcome !== "approved") expect(outcome).toMatch(/^402 `payment_declined`, `[a-z_]+`$/);
    }
  });
});

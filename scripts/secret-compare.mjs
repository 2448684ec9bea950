// The constant-time gate (issue 38): no secret in src/ is compared with `===`, `!==`, `==` or `!=`.
// Such a comparison stops at the first differing character, so its time tells an attacker how much of
// a guess was right; secrets are compared as equal-length digests with crypto.timingSafeEqual, or
// looked up by their SHA-256 (API keys, access tokens). Parses each file with the TypeScript compiler
// and reports every equality with an operand named like a secret (token, secret, password, API key,
// authorization, MAC, signature, digest, pepper; or a template literal that embeds one; not a
// `...Hash`, the SHA-256 a secret is looked up by), unless the other side is a literal, a `typeof`,
// an upper-case constant or a `.length`/`.size` (a presence, type or size check reveals nothing). A comparison that is not of a secret against a stored one (two
// fields of one request) says why on the line above: `// secret-compare: <why it is safe>`.
//
//   node scripts/secret-compare.mjs          every tracked src/**/*.ts
//   node scripts/secret-compare.mjs FILE...  those files
// Prints `file:line<TAB>text` for each comparison found and exits with status 1 when it printed any.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

/**
 * Whether a name holds a secret; not a `...Hash`, the SHA-256 a secret is looked up by (as the
 * MongoDB store finds it through its index).
 * @param {string} name
 */
function isSecretName(name) {
  return SECRET_NAME.test(name) && !/Hash$/.test(name);
}

/** A name that holds a secret, or something as good as one (its digest, its MAC); page tokens are cursors. */
const SECRET_NAME =
  /(?<!page_?)token|secret|password|passphrase|authorization|api_?key(?!_?id)|hmac|mac$|^mac|signature|digest|pepper/i;
const EQUALITY = new Set([
  ts.SyntaxKind.EqualsEqualsEqualsToken,
  ts.SyntaxKind.ExclamationEqualsEqualsToken,
  ts.SyntaxKind.EqualsEqualsToken,
  ts.SyntaxKind.ExclamationEqualsToken,
]);
const EXEMPTION = "secret-compare:";

/**
 * The name an operand is read by: an identifier, the last member of a property access, or the name a
 * call returns from; undefined for anything else.
 * @param {ts.Expression} node
 * @returns {string | undefined}
 */
function nameOf(node) {
  while (ts.isParenthesizedExpression(node) || ts.isAsExpression(node) || ts.isNonNullExpression(node))
    node = node.expression;
  if (ts.isIdentifier(node)) return node.text;
  if (ts.isPropertyAccessExpression(node)) return node.name.text;
  if (ts.isElementAccessExpression(node) && ts.isStringLiteralLike(node.argumentExpression))
    return node.argumentExpression.text;
  if (ts.isCallExpression(node)) return nameOf(node.expression);
  return undefined;
}

/**
 * The names an operand is read by: its own, or those of the values a template literal embeds
 * (`Bearer ${adminToken}`).
 * @param {ts.Expression} node
 * @returns {string[]}
 */
function namesOf(node) {
  if (ts.isTemplateExpression(node)) return node.templateSpans.flatMap((span) => namesOf(span.expression));
  const name = nameOf(node);
  return name === undefined ? [] : [name];
}

/**
 * Whether comparing with this operand reveals nothing about a secret: a literal (`""`, `undefined`,
 * `null`, a number), a `typeof`, an upper-case constant (a protocol value), or a length or size.
 * @param {ts.Expression} node
 */
function isHarmless(node) {
  while (ts.isParenthesizedExpression(node)) node = node.expression;
  if (
    ts.isStringLiteralLike(node) ||
    ts.isNumericLiteral(node) ||
    ts.isTypeOfExpression(node) ||
    node.kind === ts.SyntaxKind.NullKeyword ||
    node.kind === ts.SyntaxKind.TrueKeyword ||
    node.kind === ts.SyntaxKind.FalseKeyword
  )
    return true;
  if (ts.isIdentifier(node) && node.text === "undefined") return true;
  // A constant of the protocol (a signature type, a version): never a secret in src/.
  if (ts.isIdentifier(node) && /^[A-Z][A-Z0-9_]*$/.test(node.text)) return true;
  if (ts.isPrefixUnaryExpression(node) && ts.isNumericLiteral(node.operand)) return true;
  const name = ts.isPropertyAccessExpression(node) ? node.name.text : undefined;
  return name === "length" || name === "size" || name === "byteLength";
}

/**
 * Every plain equality of a secret in one source text.
 * @param {string} fileName for the report only
 * @param {string} text TypeScript source
 * @returns {Array<{ line: number; text: string }>}
 */
export function plainSecretComparisons(fileName, text) {
  const file = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const lines = text.split("\n");
  /** @type {Array<{ line: number; text: string }>} */
  const found = [];
  /** @param {ts.Node} node */
  const visit = (node) => {
    if (ts.isBinaryExpression(node) && EQUALITY.has(node.operatorToken.kind)) {
      const { left, right } = node;
      const secret = [left, right].some((side) => namesOf(side).some(isSecretName));
      if (secret && !isHarmless(left) && !isHarmless(right)) {
        const line = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
        if (!(lines[line - 1] ?? "").includes(EXEMPTION))
          found.push({ line: line + 1, text: node.getText(file) });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

function main() {
  const root = join(fileURLToPath(new URL(".", import.meta.url)), "..");
  const given = process.argv.slice(2);
  const files =
    given.length > 0
      ? given
      : execFileSync("git", ["ls-files", "src/**/*.ts"], { cwd: root, encoding: "utf8" })
          .split("\n")
          .filter(Boolean)
          .map((f) => join(root, f));
  let count = 0;
  for (const path of files) {
    for (const { line, text } of plainSecretComparisons(path, readFileSync(path, "utf8"))) {
      console.log(`${relative(process.cwd(), path)}:${line}\t${text}`);
      count += 1;
    }
  }
  if (count > 0) {
    console.error(
      `${count} secret(s) compared with ===/!==: compare equal-length digests with crypto.timingSafeEqual.`,
    );
    process.exit(1);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();

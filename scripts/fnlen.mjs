// The function-length gate: no function in src/ runs over 80 lines: no function should
// need scrolling to understand. Parses each file with the TypeScript compiler and measures every
// function-like node that has a body (declarations, methods, accessors, constructors, function
// expressions and arrow functions), from its first token to its closing line, doc comment excluded.
// A nested function counts towards its parent as well as on its own.
//
//   node scripts/fnlen.mjs                 every tracked src/**/*.ts
//   node scripts/fnlen.mjs FILE...         those files
// Prints `lines<TAB>file:line<TAB>name` for each function over the limit, longest first, and exits
// with status 1 when it printed anything, 0 otherwise.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const LIMIT = 80;

/**
 * The name a reader would search for: the declared name, or for an anonymous function the variable,
 * property or class member it is assigned to; `<anonymous>` otherwise.
 * @param {ts.Node} node a function-like node
 * @param {ts.SourceFile} file
 * @returns {string}
 */
function nameOf(node, file) {
  if (ts.isConstructorDeclaration(node)) return "constructor";
  if ("name" in node && node.name !== undefined) return node.name.getText(file);
  const parent = node.parent;
  if (
    (ts.isVariableDeclaration(parent) ||
      ts.isPropertyAssignment(parent) ||
      ts.isPropertyDeclaration(parent)) &&
    parent.name !== undefined
  )
    return parent.name.getText(file);
  if (ts.isBinaryExpression(parent) && parent.operatorToken.kind === ts.SyntaxKind.EqualsToken)
    return parent.left.getText(file);
  return "<anonymous>";
}

/**
 * Every function with a body in `path` longer than the limit.
 * @param {string} path
 * @returns {{ lines: number, where: string, name: string }[]}
 */
function longFunctions(path) {
  const file = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.Latest, true);
  const found = [];
  const visit = (node) => {
    if (ts.isFunctionLike(node) && "body" in node && node.body !== undefined) {
      const first = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
      const last = file.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = last - first + 1;
      if (lines > LIMIT) found.push({ lines, where: `${path}:${first + 1}`, name: nameOf(node, file) });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

const root = fileURLToPath(new URL("..", import.meta.url));
const given = process.argv.slice(2);
// Without arguments: the tracked sources, named relative to where the script was started from.
const files =
  given.length > 0
    ? given
    : execFileSync("git", ["ls-files", "src/*.ts"], { cwd: root, encoding: "utf8" })
        .split("\n")
        .filter(Boolean)
        .map((path) => relative(process.cwd(), join(root, path)));
const found = files.flatMap(longFunctions).sort((a, b) => b.lines - a.lines);
process.stdout.write(found.map(({ lines, where, name }) => `${lines}\t${where}\t${name}\n`).join(""));
process.exitCode = found.length > 0 ? 1 : 0;

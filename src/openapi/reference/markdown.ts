/**
 * The small part of CommonMark the API reference's texts use, rendered to HTML: paragraphs, `##` and
 * `###` headings, `-` and `1.` lists (continuation lines indented), pipe tables, and inline code,
 * `**strong**`, `*emphasis*` and `[links](url)`. Everything else is text, escaped. The input is the
 * project's own prose (the guide, proto comments), so this is about rendering it well, not about
 * accepting any Markdown; nothing in it is ever emitted unescaped.
 */

/** Escapes text for HTML content and attribute values. */
export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

/** Link targets kept as links: relative paths and anchors, and http(s) URLs. Others stay text. */
const SAFE_URL = /^(\/(?!\/)|#|https?:\/\/)/;

/** Inline Markdown of one line or paragraph. Code spans first, so nothing inside them is formatted. */
export function inline(text: string): string {
  return text
    .split(/(`[^`]*`)/)
    .map((part, i) => (i % 2 === 1 ? `<code>${escapeHtml(part.slice(1, -1))}</code>` : formatted(part)))
    .join("");
}

function formatted(text: string): string {
  return escapeHtml(text)
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[\s(])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>")
    .replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (whole, label: string, url: string) =>
      SAFE_URL.test(url) ? `<a href="${url}">${label}</a>` : whole,
    );
}

const BULLET = /^- (.*)$/;
const NUMBERED = /^\d+\. (.*)$/;
const HEADING = /^(#{2,4}) (.*)$/;

/** Renders `text` as blocks of HTML; `headingOffset` shifts heading levels (`##` as h3 with 1). */
export function markdown(text: string, headingOffset = 0): string {
  const blocks: string[] = [];
  const lines = text.split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i] ?? "";
    if (line.trim() === "") {
      i++;
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading !== null) {
      const level = Math.min(6, (heading[1] ?? "").length + headingOffset);
      blocks.push(`<h${level}>${inline(heading[2] ?? "")}</h${level}>`);
      i++;
      continue;
    }
    if (line.startsWith("|")) {
      const rows: string[] = [];
      while (i < lines.length && (lines[i] ?? "").startsWith("|")) rows.push(lines[i++] ?? "");
      blocks.push(table(rows));
      continue;
    }
    const list = BULLET.test(line) ? BULLET : NUMBERED.test(line) ? NUMBERED : undefined;
    if (list !== undefined) {
      const items: string[] = [];
      while (i < lines.length) {
        const current = lines[i] ?? "";
        const item = list.exec(current);
        if (item !== null) items.push(item[1] ?? "");
        else if (/^\s+\S/.test(current) && items.length > 0) items[items.length - 1] += ` ${current.trim()}`;
        else break;
        i++;
      }
      const tag = list === BULLET ? "ul" : "ol";
      blocks.push(`<${tag}>${items.map((item) => `<li>${inline(item)}</li>`).join("")}</${tag}>`);
      continue;
    }
    const paragraph: string[] = [];
    while (i < lines.length && (lines[i] ?? "").trim() !== "" && !startsBlock(lines[i] ?? "")) {
      paragraph.push((lines[i++] ?? "").trim());
    }
    blocks.push(`<p>${inline(paragraph.join(" "))}</p>`);
  }
  return blocks.join("\n");
}

function startsBlock(line: string): boolean {
  return HEADING.test(line) || BULLET.test(line) || NUMBERED.test(line) || line.startsWith("|");
}

/** A pipe table: the first row is the header, the second (dashes) is skipped. */
function table(rows: string[]): string {
  const cells = (row: string) =>
    row
      .replace(/^\|/, "")
      .replace(/\|$/, "")
      .split("|")
      .map((cell) => cell.trim());
  const [head = "", , ...body] = rows;
  const th = cells(head)
    .map((c) => `<th>${inline(c)}</th>`)
    .join("");
  const tr = body.map(
    (row) =>
      `<tr>${cells(row)
        .map((c) => `<td>${inline(c)}</td>`)
        .join("")}</tr>`,
  );
  return `<table><thead><tr>${th}</tr></thead><tbody>${tr.join("")}</tbody></table>`;
}

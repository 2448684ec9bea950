/** The API reference page's stylesheet, inlined in the page: it loads nothing from anywhere. */
export const REFERENCE_CSS = `
:root { --ink: #1b1f24; --muted: #57606a; --line: #d8dee4; --bg: #ffffff; --side: #f6f8fa;
  --code-bg: #0f1720; --code-ink: #e6edf3; --accent: #0b5cad; }
* { box-sizing: border-box; }
html { scroll-padding-top: 4rem; }
body { margin: 0; font: 15px/1.55 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); background: var(--bg); }
a { color: var(--accent); }
code { font: 0.88em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #eff2f5; padding: 0.05em 0.3em; border-radius: 3px; }
pre { background: var(--code-bg); color: var(--code-ink); padding: 0.9rem 1rem; border-radius: 6px; overflow-x: auto; font-size: 0.85em; line-height: 1.45; }
pre code { background: none; padding: 0; color: inherit; font-size: 1em; }
.top { position: sticky; top: 0; z-index: 2; display: flex; align-items: baseline; gap: 1rem; padding: 0.8rem 1.5rem;
  background: #102a43; color: #fff; }
.top .product { font-weight: 650; font-size: 1.1rem; }
.top .subtitle { color: #bcccdc; }
.top nav { margin-left: auto; display: flex; gap: 1.2rem; }
.top nav a { color: #dbeafe; }
.layout { display: grid; grid-template-columns: 17rem minmax(0, 1fr); }
.sidebar { position: sticky; top: 3.2rem; align-self: start; height: calc(100vh - 3.2rem); overflow-y: auto;
  background: var(--side); border-right: 1px solid var(--line); padding: 1rem 0.8rem 2rem; font-size: 0.9em; }
.sidebar h2 { font-size: 0.75rem; text-transform: uppercase; letter-spacing: 0.06em; color: var(--muted); margin: 1.2rem 0 0.3rem; }
.sidebar ul { list-style: none; margin: 0; padding: 0; }
.sidebar li a { display: flex; align-items: baseline; gap: 0.4rem; padding: 0.15rem 0.3rem; border-radius: 4px; color: var(--ink); text-decoration: none; }
.sidebar .verb { min-width: 3.2rem; flex: none; }
.sidebar li a:hover { background: #e7ecf0; }
main { padding: 1.5rem 2.5rem 4rem; max-width: 64rem; }
main > section { border-bottom: 1px solid var(--line); padding-bottom: 1rem; margin-bottom: 1.5rem; }
.guide h2 { margin-top: 2rem; }
table { border-collapse: collapse; width: 100%; margin: 0.5rem 0 1rem; font-size: 0.92em; }
td p { margin: 0 0 0.4rem; } td p:last-child { margin: 0; }
th, td { text-align: left; vertical-align: top; padding: 0.35rem 0.6rem; border-bottom: 1px solid var(--line); }
th { font-weight: 600; color: var(--muted); }
td:first-child code { white-space: nowrap; }
.operation { border: 1px solid var(--line); border-radius: 8px; padding: 0.4rem 1.2rem 1rem; margin: 1.2rem 0 1.8rem; }
.operation h3 { display: flex; align-items: center; gap: 0.6rem; font-size: 1.05rem; margin: 0.8rem 0 0.4rem; }
.operation h3 code { font-size: 0.95em; background: none; padding: 0; overflow-wrap: anywhere; min-width: 0; }
.operation h4 { margin: 1.2rem 0 0.3rem; font-size: 0.95rem; }
.verb { display: inline-block; min-width: 3.6rem; text-align: center; font: 700 0.72rem ui-monospace, monospace;
  padding: 0.15rem 0.35rem; border-radius: 4px; color: #fff; background: #57606a; }
.verb-get { background: #0969da; } .verb-post { background: #1a7f37; } .verb-put { background: #9a6700; }
.verb-delete { background: #cf222e; }
.facts { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 0.2rem 1rem; margin: 0.6rem 0; font-size: 0.92em; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; overflow-wrap: anywhere; }
.badge { display: inline-block; font-size: 0.72rem; font-weight: 600; padding: 0 0.35rem; border-radius: 3px;
  border: 1px solid #bf8700; color: #7d4e00; margin-left: 0.3rem; }
.errors { list-style: none; padding: 0; margin: 0; }
.errors li { margin: 0.2rem 0; }
.status { display: inline-block; min-width: 2.4rem; font-weight: 600; color: var(--muted); }
.schema { margin: 1rem 0 1.6rem; }
td { overflow-wrap: anywhere; }
@media (max-width: 60rem) {
  .layout { grid-template-columns: minmax(0, 1fr); } .sidebar { display: none; } main { padding: 1rem; }
  .top { flex-wrap: wrap; } .top nav { margin-left: 0; }
}
`;

"""A run's report as one self-contained page: ``report.html``.

The page needs no network and no other file (it opens from ``file://``): its
CSS and script are inline, and its figures are SVG drawn by that script from
one JSON blob embedded in the page. It shows

* the lineage tree of every program (parent -> child; x is the generation,
  leaves are stacked in iteration order and a parent sits beside the middle of
  its children), nodes coloured by fitness and shaped by island, the returned
  program's lineage back to its seed drawn thick, with pan (drag) and zoom
  (wheel);
* fitness over time (iteration on x; when every fitness is negative, as the
  negative exploitability of the game tasks, the magnitude on a log scale as
  :func:`societas.evolve.report.plot_fitness` draws it), the best so far, and
  failed evaluations and failed mutations in a strip of their own;
* a sortable table of the programs, and on a click on a program anywhere its
  status, operator, lineage, unified diff against its parent (or the seed, or
  a crossover's second parent), code, metrics and artifacts;
* filters by island, operator and status that every view follows, and the
  held-out, island and operator tables the report computed.

Size: a child's code is stored as the line edits that make it from its
parent's (``difflib`` opcodes, computed here), and rebuilt by the page only for
the program a user opens; artifacts longer than :data:`ARTIFACT_LIMIT`
characters keep their head and tail. 5,000 programs of ~2.5 kB each (with
~300 characters of artifacts apiece) give a page of about 3 MB that a browser
opens in one to two seconds; the tree is one SVG element per program, the
program table draws 100 rows at a time.
"""

from __future__ import annotations

import collections
import difflib
import json
import math
from pathlib import Path
from typing import Any

from societas.agents.documents import escape_script_json

from .held_out import HeldOutEntry
from .program import Program

__all__ = ["ARTIFACT_LIMIT", "html_report_data", "render_html_report", "write_html_report"]

# Artifacts (stdout, stderr, tracebacks, LLM answers) longer than this keep their head and tail.
ARTIFACT_LIMIT = 4000


def _number(value: Any) -> float | None:
    """A finite float for JSON, else None (NaN and infinities are not JSON)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _clip(text: str, limit: int = ARTIFACT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    head = limit * 3 // 8
    tail = limit - head
    left_out = len(text) - head - tail
    return f"{text[:head]}\n… [{left_out} characters left out here; programs.db holds the whole text] …\n{text[-tail:]}"


def _edits(parent: str, child: str) -> list[list[Any]]:
    """The line edits that turn ``parent`` into ``child``: ``[i1, i2, [new lines]]`` replaces parent lines
    ``i1:i2`` (lines split on ``\\n``, so joining with ``\\n`` gives the code back exactly)."""
    a, b = parent.split("\n"), child.split("\n")
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [[i1, i2, b[j1:j2]] for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def _held_out_rows(entries: list[HeldOutEntry]) -> list[dict[str, Any]]:
    return [
        {
            "label": e.label,
            "kind": e.kind,
            "status": e.status,
            "score": _number(e.score),
            "metrics": {k: _number(v) for k, v in e.metrics.items()},
            "failure": _clip(e.failure or "", 600) or None,
            "program": e.program_id,
        }
        for e in entries
    ]


def html_report_data(
    programs: list[Program],
    *,
    title: str = "Evolution run",
    facts: list[tuple[str, Any]] | None = None,
    best_id: str | None = None,
    top_id: str | None = None,
    held_out: list[HeldOutEntry] | None = None,
    means: dict[str, dict[str, float | None]] | None = None,
    islands: list[dict[str, Any]] | None = None,
    operators: dict[str, dict[str, int]] | None = None,
    validation: dict[str, float | None] | None = None,
    warning: str | None = None,
) -> dict[str, Any]:
    """The page's data: one JSON-ready dict (programs in iteration order, parents as indices)."""
    programs = sorted(programs, key=lambda p: p.iteration)
    index = {p.id: i for i, p in enumerate(programs)}
    names = sorted({k for p in programs for k in p.metrics})
    slot = {name: j for j, name in enumerate(names)}
    ok = [p.fitness for p in programs if p.ok and p.fitness is not None]
    validation = validation or {}
    rows = []
    for p in programs:
        parent = index.get(p.parent_id) if p.parent_id is not None else None
        donor_id = p.mutation.get("donor_id")
        row: dict[str, Any] = {
            "id": p.id,
            "it": p.iteration,
            "p": parent,
            "g": p.generation,
            "is": p.island,
            "op": str(p.mutation.get("kind", "?")),
            "s": p.status,
            "f": _number(p.fitness) if p.ok else None,
        }
        info = {k: v for k, v in p.mutation.items() if k != "kind"}
        if info:
            row["mu"] = _json_safe(info)
        if isinstance(donor_id, str) and donor_id in index:
            row["x"] = index[donor_id]
        if p.metrics:
            values: list[float | None] = [None] * len(names)
            for name, value in p.metrics.items():
                number = _number(value)
                # 8 significant digits: the page shows 6, and the blob stays small.
                values[slot[name]] = float(f"{number:.8g}") if number is not None else None
            row["m"] = values
        if p.artifacts:
            row["a"] = {k: _clip(str(v)) for k, v in p.artifacts.items()}
        if p.stage_scores:
            row["ss"] = _json_safe(p.stage_scores)
        if p.stopped_at is not None:
            row["sa"] = p.stopped_at
        if p.eval_seconds:
            row["t"] = round(p.eval_seconds, 3)
        if p.id in validation:
            row["v"] = _number(validation[p.id])
        if parent is None:
            row["c"] = p.code
        else:
            edits = _edits(programs[parent].code, p.code)
            # A rewrite stores less as itself than as edits.
            if len(json.dumps(edits)) < len(p.code):
                row["d"] = edits
            else:
                row["c"] = p.code
        rows.append(row)
    status = collections.Counter(p.status for p in programs)
    return {
        "title": title,
        "facts": [[label, _json_safe(value)] for label, value in (facts or [])],
        "warning": warning,
        "negative": bool(ok) and all(f < 0 for f in ok),
        "best": index.get(best_id) if best_id is not None else None,
        "top": index.get(top_id) if top_id is not None else None,
        "counts": {
            "ok": status["ok"],
            "failed": status["failed"],
            "mutation_failed": status["mutation_failed"],
        },
        "metricNames": names,
        "programs": rows,
        "heldOut": _held_out_rows(held_out) if held_out is not None else None,
        "means": _json_safe(means) if means else None,
        "islands": _json_safe(islands) if islands else None,
        "operators": _json_safe(operators) if operators else None,
    }


def _embed(data: dict[str, Any]) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``<`` at all (so no ``</script>``, no ``<!--``)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    return escape_script_json(text)


def render_html_report(data: dict[str, Any]) -> str:
    """The page for :func:`html_report_data`'s ``data``."""
    title = str(data.get("title", "Evolution run"))
    escaped = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        _PAGE.replace("%TITLE%", escaped)
        .replace("%CSS%", _CSS)
        .replace("%SCRIPT%", _SCRIPT)
        .replace("%DATA%", _embed(data))
    )


def write_html_report(path: str | Path, programs: list[Program], **options: Any) -> dict[str, Any]:
    """Write ``report.html`` (see :func:`html_report_data` for ``options``); return its path and size."""
    path = Path(path)
    page = render_html_report(html_report_data(programs, **options))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return {"path": str(path), "bytes": len(page.encode("utf-8")), "programs": len(programs)}


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%CSS%</style>
</head>
<body>
<header id="top"></header>
<div id="filters" class="filters"></div>
<main>
  <div class="col-left">
    <section class="card" id="tree-card">
      <div class="card-head">
        <h2>Lineage</h2>
        <div class="tools">
          <button type="button" id="tree-best" title="zoom to the returned program's lineage">Best lineage</button>
          <button type="button" id="tree-fit" title="show the whole tree">Fit all</button>
          <button type="button" id="tree-in" aria-label="zoom in">+</button>
          <button type="button" id="tree-out" aria-label="zoom out">&minus;</button>
        </div>
      </div>
      <div id="tree-legend" class="legend"></div>
      <div class="tree-box"><svg id="tree" role="img" aria-label="lineage tree"></svg>
        <div class="hint">wheel: zoom &middot; drag: pan &middot; click: open a program</div></div>
    </section>
    <section class="card" id="plot-card">
      <div class="card-head"><h2>Fitness over time</h2><div id="plot-legend" class="legend inline"></div></div>
      <div class="plot-box"><svg id="plot" role="img" aria-label="fitness over time"></svg></div>
    </section>
    <section class="card" id="table-card">
      <div class="card-head"><h2>Programs</h2>
        <div class="tools"><input type="search" id="table-search" placeholder="find id or iteration"></div></div>
      <div class="table-wrap"><table id="programs" class="grid"></table></div>
      <div id="table-more" class="more"></div>
    </section>
  </div>
  <aside class="col-right"><section class="card" id="details"></section></aside>
</main>
<div class="wide">
  <section class="card" id="held-out-card" hidden></section>
  <section class="card" id="stats-card" hidden></section>
</div>
<div id="tip" class="tip" hidden></div>
<script type="application/json" id="report-data">%DATA%</script>
<script>%SCRIPT%</script>
</body>
</html>
"""

_CSS = r"""
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #f6f8fa; --card: #fff;
  --accent: #0969da; --best: #d4380d; --ok: #1a7f37; --bad: #cf222e; --mono: ui-monospace, SFMono-Regular,
  Menlo, Consolas, "DejaVu Sans Mono", monospace; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: var(--fg); background: var(--bg); }
header { background: var(--card); border-bottom: 1px solid var(--line); padding: 12px 20px 10px; }
header h1 { font-size: 19px; margin: 0 0 6px; font-weight: 600; }
.facts { display: flex; flex-wrap: wrap; gap: 4px 18px; color: var(--muted); font-size: 13px; }
.facts b { color: var(--fg); font-weight: 600; }
.warning { margin: 8px 0 0; padding: 6px 10px; background: #fff1f0; border: 1px solid #ffa39e; border-radius: 6px;
  color: #a8071a; font-size: 13px; }
.filters { display: flex; flex-wrap: wrap; align-items: center; gap: 6px 18px; padding: 8px 20px;
  background: var(--card); border-bottom: 1px solid var(--line); font-size: 13px; }
.filters .group { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 6px; }
.filters .group > span.lbl { color: var(--muted); margin-right: 2px; }
.chip { display: inline-flex; align-items: center; gap: 4px; border: 1px solid var(--line); border-radius: 999px;
  padding: 1px 9px 1px 6px; cursor: pointer; user-select: none; background: #fff; white-space: nowrap; }
.chip input { margin: 0; accent-color: var(--accent); }
.chip.off { color: #8c959f; background: var(--bg); }
.chip svg { display: block; }
.chip .n { color: var(--muted); font-size: 12px; }
.count { margin-left: auto; font-weight: 600; }
main { display: grid; grid-template-columns: minmax(0, 1fr) minmax(360px, 42%); gap: 16px; padding: 16px 20px;
  align-items: start; }
.col-left { min-width: 0; }
.col-right { position: sticky; top: 10px; min-width: 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; margin-bottom: 16px;
  min-width: 0; }
.card-head { display: flex; align-items: center; gap: 12px; padding: 8px 12px 4px; flex-wrap: wrap; }
.card-head h2 { font-size: 15px; margin: 0; font-weight: 600; }
.card-head .tools { margin-left: auto; display: flex; gap: 4px; }
button { font: inherit; font-size: 12px; padding: 2px 9px; border: 1px solid var(--line); border-radius: 6px;
  background: #f6f8fa; color: var(--fg); cursor: pointer; }
button:hover { background: #eef1f4; }
button.link { border: 0; background: none; color: var(--accent); padding: 0; font-size: inherit; cursor: pointer; }
button.link:hover { text-decoration: underline; }
input[type=search] { font: inherit; font-size: 12px; padding: 2px 6px; border: 1px solid var(--line);
  border-radius: 6px; width: 170px; }
.legend { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 14px; padding: 0 12px 6px;
  font-size: 12px; color: var(--muted); }
.legend.inline { padding: 0; }
.legend .sw { display: inline-flex; align-items: center; gap: 5px; }
.legend .bar { width: 120px; height: 10px; border-radius: 2px; border: 1px solid #aaa; }
.tree-box { position: relative; border-top: 1px solid var(--line); }
#tree { display: block; width: 100%; height: 540px; cursor: grab; background: #fcfcfd; touch-action: none; }
#tree.dragging { cursor: grabbing; }
.hint { position: absolute; right: 8px; bottom: 6px; font-size: 11px; color: #8c959f; pointer-events: none;
  background: rgba(255,255,255,.85); padding: 0 4px; border-radius: 3px; }
#tree .edges { fill: none; stroke: #b6bec7; stroke-width: 1; vector-effect: non-scaling-stroke; }
#tree .lineage { fill: none; stroke: var(--best); stroke-width: 6; vector-effect: non-scaling-stroke;
  stroke-linejoin: round; opacity: .5; }
#tree .sel-lineage { fill: none; stroke: var(--accent); stroke-width: 2; vector-effect: non-scaling-stroke;
  stroke-linejoin: round; }
#tree .donor { fill: none; stroke: var(--accent); stroke-width: 1.6; stroke-dasharray: 5 4;
  vector-effect: non-scaling-stroke; }
#tree .mk { transform: scale(var(--msx, 1), var(--msy, 1)); stroke: #2d333b; stroke-width: .7;
  vector-effect: non-scaling-stroke; }
#tree .n { cursor: pointer; }
#tree .n.off { opacity: .13; }
#tree .n.failed .mk { stroke: #8c959f; }
#tree .n.mutation_failed .mk { stroke: #8c959f; stroke-dasharray: 2 2; }
#tree .lb { transform: scale(var(--lsx, 1), var(--lsy, 1)); font-size: 10px; fill: var(--muted); display: none;
  pointer-events: none; paint-order: stroke; stroke: #fcfcfd; stroke-width: 3px; stroke-linejoin: round; }
#tree.labels .lb { display: block; }
#tree .ring { fill: none; stroke-width: 2.2; vector-effect: non-scaling-stroke;
  transform: scale(var(--msx, 1), var(--msy, 1));
  pointer-events: none; }
.ring.best { stroke: var(--best); }
.ring.sel { stroke: var(--accent); }
.plot-box { padding: 0 6px 6px; }
#plot { display: block; width: 100%; height: 350px; }
#plot .pt { cursor: pointer; stroke: #2d333b; stroke-width: .6; }
#plot .axis line, #plot .axis path { stroke: #8c959f; }
#plot .grid line { stroke: #eaeef2; }
#plot text { font-size: 11px; fill: var(--muted); }
#plot .title { font-size: 12px; fill: var(--fg); }
#plot .bestline { fill: none; stroke: var(--best); stroke-width: 1.8; }
#plot .fail { stroke: #bc4c00; stroke-width: 1.5; cursor: pointer; }
#plot .mfail { stroke: #8c959f; stroke-width: 1.5; cursor: pointer; }
#plot .ringp { fill: none; stroke-width: 2.2; pointer-events: none; }
.table-wrap { overflow: auto; max-height: 520px; border-top: 1px solid var(--line); }
table.grid { border-collapse: collapse; width: 100%; font-size: 12.5px; }
table.grid th, table.grid td { padding: 3px 7px; border-bottom: 1px solid #eaeef2; text-align: left;
  white-space: nowrap; }
table.grid th { position: sticky; top: 0; background: #f6f8fa; font-weight: 600; z-index: 1; }
table.grid th.num, table.grid td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.grid th.sortable { cursor: pointer; }
table.grid th.sortable:hover { color: var(--accent); }
#programs tbody tr { cursor: pointer; }
#programs tbody tr:hover { background: #f3f7fd; }
#programs tbody tr.sel { background: #ddf4ff; }
#programs tbody tr.best td:first-child { box-shadow: inset 3px 0 0 var(--best); }
td.mono, .mono { font-family: var(--mono); font-size: 12px; }
.up { color: var(--ok); } .down { color: var(--bad); }
.badge { display: inline-block; padding: 0 7px; border-radius: 999px; font-size: 11.5px; font-weight: 600;
  line-height: 18px; border: 1px solid transparent; white-space: nowrap; }
.badge.ok { background: #dafbe1; color: #116329; }
.badge.failed { background: #ffebe9; color: #a40e26; }
.badge.mutation_failed { background: #eaeef2; color: #424a53; }
.badge.partial { background: #fff8c5; color: #6a4b00; }
.badge.best { background: #fff2e8; color: var(--best); border-color: #ffbb96; }
.badge.top { background: #fffbe6; color: #ad6800; border-color: #ffe58f; }
.more { padding: 6px 12px; font-size: 12px; color: var(--muted); }
.more button { margin-left: 8px; }
#details { max-height: calc(100vh - 20px); display: flex; flex-direction: column; margin: 0; }
#details .d-head { padding: 10px 14px 6px; border-bottom: 1px solid var(--line); }
#details h2 { font-size: 16px; margin: 0 0 4px; display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
#details .pid { font-family: var(--mono); font-size: 12.5px; color: var(--muted); font-weight: 400; }
.kv { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 2px 12px; font-size: 13px;
  margin: 6px 0 2px; }
.kv dt { color: var(--muted); }
.kv dd { margin: 0; overflow-wrap: anywhere; }
.failure { margin: 6px 0 2px; padding: 5px 8px; background: #fff1f0; border-left: 3px solid var(--bad);
  font-family: var(--mono); font-size: 12px; white-space: pre-wrap; overflow-wrap: anywhere;
  max-height: 90px; overflow: auto; }
.crumbs { display: flex; flex-wrap: wrap; align-items: center; gap: 3px; font-size: 12px; margin-top: 6px; }
.crumbs .c { border: 1px solid var(--line); border-radius: 5px; padding: 0 5px; background: #fff; cursor: pointer;
  font-family: var(--mono); font-size: 11.5px; }
.crumbs .c:hover { border-color: var(--accent); }
.crumbs .c.here { border-color: var(--accent); background: #ddf4ff; }
.crumbs .arrow { color: #8c959f; }
.tabs { display: flex; gap: 2px; padding: 6px 14px 0; border-bottom: 1px solid var(--line); }
.tabs button { border: 1px solid transparent; border-bottom: 0; border-radius: 6px 6px 0 0; background: none;
  padding: 4px 12px; font-size: 13px; margin-bottom: -1px; }
.tabs button.on { border-color: var(--line); background: var(--card); font-weight: 600; }
.tab-body { overflow: auto; flex: 1 1 auto; min-height: 120px; padding: 8px 14px 12px; }
.tab-tools { display: flex; gap: 8px; align-items: center; font-size: 12px; color: var(--muted);
  margin-bottom: 6px; }
.tab-tools select { font: inherit; font-size: 12px; }
pre.code, pre.diff { margin: 0; font-family: var(--mono); font-size: 12px; line-height: 1.45; tab-size: 4; }
pre.code { counter-reset: ln; }
pre.code .l { display: block; padding-left: 3.6em; text-indent: -3.6em; white-space: pre-wrap;
  overflow-wrap: anywhere; min-height: 1.45em; }
pre.code .l::before { counter-increment: ln; content: counter(ln); display: inline-block; width: 2.8em;
  margin-right: .8em; text-align: right; color: #8c959f; text-indent: 0; }
pre.code .l.blk { background: #f6f8fa; color: #6e7781; }
pre.diff .l { display: block; white-space: pre-wrap; overflow-wrap: anywhere; padding: 0 4px 0 calc(4px + 1ch);
  text-indent: -1ch; min-height: 1.45em; }
pre.diff .add { background: #dafbe1; }
pre.diff .del { background: #ffebe9; }
pre.diff .hunk { color: #8250df; background: #f6f2ff; }
pre.diff .file { color: var(--muted); font-weight: 600; }
.empty { color: var(--muted); font-size: 13px; padding: 10px 0; }
.art h4 { margin: 10px 0 4px; font-size: 12.5px; font-family: var(--mono); }
.art pre { margin: 0; padding: 6px 8px; background: #f6f8fa; border-radius: 6px; font-family: var(--mono);
  font-size: 11.5px; white-space: pre-wrap; overflow-wrap: anywhere; max-height: 260px; overflow: auto; }
.wide { padding: 0 20px 8px; }
table.grid.compact { width: auto; }
#held-out-card .body, #stats-card .body { padding: 4px 12px 12px; overflow-x: auto; }
#held-out-card p, #stats-card p { margin: 4px 0 8px; font-size: 13px; color: var(--muted); }
.stats { display: flex; flex-wrap: wrap; gap: 24px; }
.stats > div { min-width: 0; }
.stats h3 { font-size: 13px; margin: 6px 0 4px; }
th.metric { white-space: normal !important; min-width: 80px; max-width: 190px; vertical-align: bottom;
  overflow-wrap: anywhere; font-size: 11.5px; }
td.bold { font-weight: 700; }
.tip { position: fixed; z-index: 10; pointer-events: none; background: #24292f; color: #fff; font-size: 12px;
  padding: 4px 8px; border-radius: 5px; max-width: 360px; line-height: 1.35; }
@media (max-width: 1000px) { main { grid-template-columns: minmax(0, 1fr); } .col-right { position: static; } }
"""

_SCRIPT = r"""
(function () {
'use strict';
const T0 = performance.now();
const D = JSON.parse(document.getElementById('report-data').textContent);
const P = D.programs, N = P.length, MN = D.metricNames;
const NS = 'http://www.w3.org/2000/svg';
const $ = (s) => document.querySelector(s);
const esc = (s) => String(s).replace(/[&<>"']/g,
  (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '\u2013';
  if (typeof v !== 'number') return String(v);
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e-3 && a < 1e6) return String(+v.toPrecision(6));
  return v.toExponential(3).replace(/\.?0+e/, 'e').replace('e+', 'e');
}
const STATUS = {ok: 'ok', failed: 'evaluation failed', mutation_failed: 'mutation failed'};
const label = (i) => '#' + P[i].it;
const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

// ---------------------------------------------------------------- structure
const kids = Array.from({length: N}, () => []);
for (let i = 0; i < N; i++) if (P[i].p !== null && P[i].p !== undefined) kids[P[i].p].push(i);
const isRoot = (i) => P[i].p === null || P[i].p === undefined;
function lineage(i) {
  const out = [];
  for (let j = i; j !== null && j !== undefined; j = P[j].p) out.push(j);
  return out.reverse();
}
const signed = (v) => (v === null || v === undefined ? '' : (v > 0 ? '+' : '') + fmt(v));
const trend = (v) => (v > 0 ? 'up' : v < 0 ? 'down' : '');
const heads = (names, cls = 'num') => names.map((n) => `<th class="${cls}">${n}</th>`).join('');
const nums = (values) => values.map((v) => `<td class="num">${v}</td>`).join('');
const swatchLine = (colour, width, extra = '') => '<svg width="22" height="10"><line x1="0" x2="22" y1="5" y2="5" ' +
  `stroke="${colour}" stroke-width="${width}" ${extra}/></svg>`;
const swatchDot = (fill, extra = '') => '<svg width="14" height="14" viewBox="-7 -7 14 14">' +
  `<circle r="5" fill="${fill}" stroke="#8c959f" ${extra}/></svg>`;
const islands = [...new Set(P.map((p) => p.is))].sort((a, b) => a - b);
const opCount = {};
for (const p of P) opCount[p.op] = (opCount[p.op] || 0) + 1;
const ops = Object.keys(opCount).sort((a, b) => (a === 'seed') - (b === 'seed') || opCount[b] - opCount[a]);
const BEST = D.best !== null && D.best !== undefined ? D.best : null;
const TOP = D.top !== null && D.top !== undefined ? D.top : null;
const bestPath = new Set(BEST !== null ? lineage(BEST) : []);

// ---------------------------------------------------------------- fitness scale
// Every fitness negative (negative exploitability): show the magnitude on a log scale, lower is better.
const NEG = !!D.negative;
const shown = (f) => (NEG ? Math.log10(Math.max(-f, 1e-300)) : f);
const goodness = (f) => (NEG ? -shown(f) : f);
let gLo = Infinity, gHi = -Infinity;
for (const p of P) if (p.f !== null && p.f !== undefined) { const g = goodness(p.f); if (g < gLo) gLo = g; if (g > gHi) gHi = g; }
const VIRIDIS = ['#440154', '#482878', '#3e4989', '#31688e', '#26828e', '#1f9e89', '#35b779', '#6ece58',
  '#b5de2b', '#fde725'];
function lerpHex(a, b, t) {
  const pa = [1, 3, 5].map((k) => parseInt(a.slice(k, k + 2), 16));
  const pb = [1, 3, 5].map((k) => parseInt(b.slice(k, k + 2), 16));
  return 'rgb(' + pa.map((v, k) => Math.round(v + (pb[k] - v) * t)).join(',') + ')';
}
function ramp(t) {
  t = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const k = Math.min(VIRIDIS.length - 2, Math.floor(t));
  return lerpHex(VIRIDIS[k], VIRIDIS[k + 1], t - k);
}
function colour(i) {
  const p = P[i];
  if (p.s === 'mutation_failed') return '#ffffff';
  if (p.f === null || p.f === undefined) return '#c9d1d9';
  return ramp(gHi > gLo ? (goodness(p.f) - gLo) / (gHi - gLo) : 1);
}
const fills = P.map((_, i) => colour(i));

// One marker shape per island (cycled past six), centred on 0,0 with radius r.
function shape(island, r, x = 0, y = 0) {
  const k = ((island % 6) + 6) % 6, f = (n) => +n.toFixed(2);
  switch (k) {
    case 0: return `M${f(x - r)},${f(y)}a${r},${r} 0 1,0 ${2 * r},0a${r},${r} 0 1,0 ${-2 * r},0Z`;
    case 1: { const s = r * 0.86; return `M${f(x - s)},${f(y - s)}h${f(2 * s)}v${f(2 * s)}h${f(-2 * s)}Z`; }
    case 2: { const s = r * 1.2; return `M${f(x)},${f(y - s)}L${f(x + s)},${f(y)}L${f(x)},${f(y + s)}L${f(x - s)},${f(y)}Z`; }
    case 3: { const s = r * 1.2; return `M${f(x)},${f(y - s)}L${f(x + s)},${f(y + s * 0.75)}L${f(x - s)},${f(y + s * 0.75)}Z`; }
    case 4: { const s = r * 1.2; return `M${f(x)},${f(y + s)}L${f(x + s)},${f(y - s * 0.75)}L${f(x - s)},${f(y - s * 0.75)}Z`; }
    default: {
      let d = '';
      for (let j = 0; j < 6; j++) {
        const a = Math.PI / 6 + j * Math.PI / 3;
        d += (j ? 'L' : 'M') + f(x + r * 1.05 * Math.cos(a)) + ',' + f(y + r * 1.05 * Math.sin(a));
      }
      return d + 'Z';
    }
  }
}
function glyph(island, fill = '#8c959f', size = 14) {
  return `<svg width="${size}" height="${size}" viewBox="-7 -7 14 14" aria-hidden="true">` +
    `<path d="${shape(island, 5)}" fill="${fill}" stroke="#2d333b" stroke-width=".8"/></svg>`;
}

// ---------------------------------------------------------------- filters
const state = {islands: new Set(islands), ops: new Set(ops), status: new Set(['ok', 'failed', 'mutation_failed']),
  sel: null, tab: 'diff', against: 'parent', sortKey: 'it', sortDir: 1, limit: 100, search: ''};
const match = new Uint8Array(N);
let shownCount = N;
function applyFilters() {
  shownCount = 0;
  for (let i = 0; i < N; i++) {
    const p = P[i];
    match[i] = state.islands.has(p.is) && state.ops.has(p.op) && state.status.has(p.s) ? 1 : 0;
    shownCount += match[i];
  }
}

function buildHeader() {
  const h = $('#top');
  const c = D.counts;
  let html = `<h1>${esc(D.title)}</h1><div class="facts">`;
  for (const [k, v] of D.facts) html += `<span>${esc(k)}: <b>${esc(v === null ? '\u2013' : v)}</b></span>`;
  html += `<span>programs: <b>${N}</b> (${c.ok} ok, ${c.failed} failed evaluations, ` +
    `${c.mutation_failed} failed mutations)</span>`;
  if (BEST !== null) {
    html += `<span>returned program: <button type="button" class="link" data-open="${BEST}">${esc(label(BEST))} ` +
      `${esc(P[BEST].id)}</button> (fitness <b>${fmt(P[BEST].f)}</b>, ` +
      `${plural(bestPath.size - 1, 'generation')} from its seed)</span>`;
  }
  if (TOP !== null && TOP !== BEST) {
    html += `<span>best training fitness: <button type="button" class="link" data-open="${TOP}">${esc(label(TOP))}</button> ` +
      `(<b>${fmt(P[TOP].f)}</b>)</span>`;
  }
  html += '</div>';
  if (D.warning) html += `<div class="warning">Warning: ${esc(D.warning)}</div>`;
  h.innerHTML = html;
}

function buildFilters() {
  const box = $('#filters');
  const islandCount = {};
  for (const p of P) islandCount[p.is] = (islandCount[p.is] || 0) + 1;
  const statusCount = {ok: D.counts.ok, failed: D.counts.failed, mutation_failed: D.counts.mutation_failed};
  let html = '<div class="group" data-group="islands"><span class="lbl">Islands</span>';
  for (const k of islands) {
    html += `<label class="chip" title="island ${k}"><input type="checkbox" data-filter="island" value="${k}" checked>` +
      `${glyph(k)}island ${k} <span class="n">${islandCount[k]}</span></label>`;
  }
  html += '</div><div class="group" data-group="operators"><span class="lbl">Operators</span>';
  for (const o of ops) {
    html += `<label class="chip"><input type="checkbox" data-filter="op" value="${esc(o)}" checked>${esc(o)} ` +
      `<span class="n">${opCount[o]}</span></label>`;
  }
  html += '</div><div class="group" data-group="status"><span class="lbl">Status</span>';
  for (const s of ['ok', 'failed', 'mutation_failed']) {
    if (!statusCount[s]) continue;
    html += `<label class="chip"><input type="checkbox" data-filter="status" value="${s}" checked>${STATUS[s]} ` +
      `<span class="n">${statusCount[s]}</span></label>`;
  }
  html += `</div><button type="button" id="filters-reset">All</button>` +
    `<span class="count" id="shown-count" data-count="${N}">${N} of ${N} programs shown</span>`;
  box.innerHTML = html;
  box.addEventListener('change', (e) => {
    const t = e.target;
    if (!t.dataset || !t.dataset.filter) return;
    const set = {island: state.islands, op: state.ops, status: state.status}[t.dataset.filter];
    const v = t.dataset.filter === 'island' ? Number(t.value) : t.value;
    if (t.checked) set.add(v); else set.delete(v);
    t.closest('.chip').classList.toggle('off', !t.checked);
    refresh();
  });
  $('#filters-reset').addEventListener('click', () => {
    islands.forEach((k) => state.islands.add(k)); ops.forEach((o) => state.ops.add(o));
    ['ok', 'failed', 'mutation_failed'].forEach((s) => state.status.add(s));
    box.querySelectorAll('input[data-filter]').forEach((el) => {
      el.checked = true;
      el.closest('.chip').classList.remove('off');
    });
    refresh();
  });
}

function refresh() {
  applyFilters();
  const c = $('#shown-count');
  c.dataset.count = shownCount;
  c.textContent = `${shownCount} of ${N} programs shown`;
  tree.filter();
  drawPlot();
  state.limit = 100;
  drawTable();
}

// ---------------------------------------------------------------- tree
const ROW = 16, COL = 90;
const tree = (() => {
  const svg = $('#tree');
  const X = new Float64Array(N), Y = new Float64Array(N);
  // Leaves stacked in iteration order, a parent beside the middle of its children (iterative: deep lineages).
  let row = 0;
  const roots = [];
  for (let i = 0; i < N; i++) if (isRoot(i)) roots.push(i);
  roots.sort((a, b) => (P[a].it !== 0) - (P[b].it !== 0) || P[a].it - P[b].it);
  for (const r of roots) {
    const stack = [[r, 0, 0]];
    while (stack.length) {
      const top = stack[stack.length - 1];
      const [i, k, depth] = top;
      const ch = kids[i];
      if (k < ch.length) { top[1]++; stack.push([ch[k], 0, depth + 1]); continue; }
      stack.pop();
      X[i] = depth * COL;
      Y[i] = ch.length ? (Y[ch[0]] + Y[ch[ch.length - 1]]) / 2 : (row++) * ROW;
    }
    row += 1;  // a gap between the trees of different seeds
  }
  let maxX = 0, maxY = 0;
  for (let i = 0; i < N; i++) { if (X[i] > maxX) maxX = X[i]; if (Y[i] > maxY) maxY = Y[i]; }
  // A small tree gets a shorter box (rows at most 2.2 times their spacing apart).
  svg.style.height = Math.round(Math.min(540, Math.max(260, maxY * 2.2 + 68))) + 'px';
  const elbow = (a, b) => `M${X[a]},${Y[a]}H${X[a] + COL / 2}V${Y[b]}H${X[b]}`;
  let edges = '';
  for (let i = 0; i < N; i++) if (!isRoot(i)) edges += elbow(P[i].p, i);
  let best = '';
  if (BEST !== null) { const l = lineage(BEST); for (let j = 1; j < l.length; j++) best += elbow(l[j - 1], l[j]); }
  const labels = N <= 2000;
  let nodes = '';
  const R = 5;
  for (let i = 0; i < N; i++) {
    nodes += `<g class="n ${P[i].s}" data-i="${i}" transform="translate(${X[i]},${Y[i]})">` +
      `<path class="mk" d="${shape(P[i].is, R)}" fill="${fills[i]}"/>` +
      (labels ? `<text class="lb" x="6" y="-6">${P[i].it}</text>` : '') + '</g>';
  }
  svg.innerHTML = `<g class="vp"><path class="edges" d="${edges}"/><path class="lineage" d="${best}"/>` +
    `<path class="sel-lineage" d=""/><path class="donor" d=""/><g class="nodes">${nodes}</g><g class="rings"></g></g>`;
  const vp = svg.querySelector('.vp');
  const nodeEls = svg.querySelector('.nodes').children;
  // The view scales y by k (rows) and x by kx = max(k, kxFit): zoomed out, the generations still span
  // the box's width; zoomed in past that, the tree is drawn to scale.
  const view = {k: 1, x: 20, y: 20};
  let kMin = 0.02, kxFit = 1;
  const K_MAX = 6, PAD = 24, LABEL_ROOM = 36;
  const size = () => ({w: svg.clientWidth || 800, h: svg.clientHeight || 540});
  const kx = () => Math.max(view.k, kxFit);
  // Markers and labels keep a legible size on screen whatever the zoom (markers 2.5 to 7 px in radius).
  // Resizing them restyles every node, so while a gesture goes on they scale with the tree, and they
  // are resized once it pauses (or at once when asked).
  let sized = null, sizeTimer = null, frame = null;
  function resize() {
    const px = R * view.k, size = Math.min(7, Math.max(2.5, px));
    sized = view.k;
    svg.style.setProperty('--msx', (size / (R * kx())).toFixed(5));
    svg.style.setProperty('--msy', (size / px).toFixed(5));
    svg.style.setProperty('--lsx', (1 / kx()).toFixed(5));
    svg.style.setProperty('--lsy', (1 / view.k).toFixed(5));
    svg.classList.toggle('labels', labels && ROW * view.k >= 15 && COL * kx() >= 30);
  }
  function apply(now) {
    if (frame === null) {
      frame = requestAnimationFrame(() => {
        frame = null;
        vp.setAttribute('transform',
          `translate(${view.x.toFixed(2)},${view.y.toFixed(2)}) scale(${kx().toFixed(5)},${view.k.toFixed(5)})`);
      });
    }
    if (now) { clearTimeout(sizeTimer); resize(); return; }
    if (sized !== null && Math.abs(Math.log(view.k / sized)) < 1e-9) return;
    clearTimeout(sizeTimer);
    sizeTimer = setTimeout(resize, 140);
  }
  function measure() {
    const {w, h} = size();
    kxFit = Math.min(3, (w - 2 * PAD - LABEL_ROOM) / Math.max(1, maxX));
    kMin = Math.min(0.3, 0.8 * (h - 2 * PAD) / Math.max(1, maxY));
  }
  // Rows y0..y1 fill the height (k at most kMax), generations x0..x1 centred.
  function fitBox(x0, y0, x1, y1, kMax = 2.2) {
    const {w, h} = size();
    view.k = Math.max(kMin, Math.min(kMax, (h - 2 * PAD) / Math.max(1, y1 - y0)));
    const sx = kx();
    view.x = (w - LABEL_ROOM) / 2 - ((x0 + x1) / 2) * sx;
    view.y = h / 2 - ((y0 + y1) / 2) * view.k;
    apply(true);
    return (x1 - x0) * sx <= w - 2 * PAD;
  }
  function fitAll() { fitBox(0, 0, maxX, maxY); }
  function fitLineage(i) {
    const l = lineage(i), {h} = size();
    let y0 = Infinity, y1 = -Infinity;
    for (const j of l) { y0 = Math.min(y0, Y[j]); y1 = Math.max(y1, Y[j]); }
    // Rows at least 4 px apart, so the lineage's neighbours stay apart; taller than that, centre its end.
    if ((h - 2 * PAD) / Math.max(1, y1 - y0) < 4 / ROW) { view.k = Math.max(view.k, 4 / ROW); center(i); return; }
    if (!fitBox(X[l[0]], y0, X[i], y1)) center(i);
  }
  function center(i) {
    const {w, h} = size(), sx = kx();
    // The whole width fits: keep it centred, move rows only.
    view.x = maxX * sx <= w - 2 * PAD - LABEL_ROOM ? (w - LABEL_ROOM) / 2 - (maxX / 2) * sx : w / 2 - X[i] * sx;
    view.y = h / 2 - Y[i] * view.k;
    apply(true);
  }
  function reveal(i) {
    const {w, h} = size(), sx = X[i] * kx() + view.x, sy = Y[i] * view.k + view.y;
    if (sx < 20 || sx > w - 20 || sy < 20 || sy > h - 20) center(i);
  }
  function initial() { measure(); fitAll(); }
  function zoomAt(factor, mx, my) {
    const k = Math.min(K_MAX, Math.max(kMin, view.k * factor)), before = kx();
    view.y = my - (my - view.y) * (k / view.k);
    view.k = k;
    view.x = mx - (mx - view.x) * (kx() / before);
    apply();
  }
  function relayout() { const before = kx(); measure(); view.x *= kx() / before; apply(true); }
  svg.addEventListener('wheel', (e) => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    zoomAt(Math.exp(-e.deltaY * (e.deltaMode ? 0.05 : 0.0015)), e.clientX - r.left, e.clientY - r.top);
  }, {passive: false});
  let drag = null;
  svg.addEventListener('pointerdown', (e) => {
    if (e.button !== 0) return;
    drag = {x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, moved: false, id: e.pointerId};
  });
  svg.addEventListener('pointermove', (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) > 4) {
      drag.moved = true; svg.classList.add('dragging'); svg.setPointerCapture(drag.id); hideTip();
    }
    if (drag.moved) { view.x = drag.vx + dx; view.y = drag.vy + dy; apply(); }
  });
  const end = () => { setTimeout(() => { drag = null; }, 0); svg.classList.remove('dragging'); };
  svg.addEventListener('pointerup', end);
  svg.addEventListener('pointercancel', end);
  svg.addEventListener('click', (e) => {
    if (drag && drag.moved) return;
    const g = e.target.closest('.n');
    if (g) select(Number(g.dataset.i), {from: 'tree'});
  });
  hover(svg, '.n');
  $('#tree-fit').addEventListener('click', fitAll);
  $('#tree-best').addEventListener('click', () => { if (BEST !== null) { fitLineage(BEST); select(BEST, {from: 'tree'}); } });
  $('#tree-in').addEventListener('click', () => { const {w, h} = size(); zoomAt(1.5, w / 2, h / 2); });
  $('#tree-out').addEventListener('click', () => { const {w, h} = size(); zoomAt(1 / 1.5, w / 2, h / 2); });
  function filter() { for (let i = 0; i < N; i++) nodeEls[i].classList.toggle('off', !match[i]); }
  function mark(i) {
    let d = '';
    if (i !== null) { const l = lineage(i); for (let j = 1; j < l.length; j++) d += elbow(l[j - 1], l[j]); }
    svg.querySelector('.sel-lineage').setAttribute('d', d);
    const x = i !== null ? P[i].x : undefined;
    svg.querySelector('.donor').setAttribute('d', x !== undefined && x !== null ?
      `M${X[x]},${Y[x]}C${X[x] + COL},${Y[x]} ${X[i] - COL},${Y[i]} ${X[i]},${Y[i]}` : '');
    let rings = '';
    if (BEST !== null) rings += `<g transform="translate(${X[BEST]},${Y[BEST]})"><circle class="ring best" r="${R + 4}"/></g>`;
    if (i !== null) rings += `<g transform="translate(${X[i]},${Y[i]})"><circle class="ring sel" r="${R + 2.5}"/></g>`;
    svg.querySelector('.rings').innerHTML = rings;
  }
  return {initial, filter, mark, reveal, fitAll, fitLineage, relayout, view};
})();

// ---------------------------------------------------------------- tooltip
const tip = $('#tip');
function tipText(i) {
  const p = P[i];
  return `<b>${esc(label(i))}</b> <span class="mono">${esc(p.id)}</span><br>island ${p.is} \u00b7 ${esc(p.op)} \u00b7 ` +
    `generation ${p.g}<br>${p.s === 'ok' ? 'fitness ' + fmt(p.f) : STATUS[p.s]}`;
}
function hideTip() { tip.hidden = true; }
function hover(root, sel) {
  root.addEventListener('mouseover', (e) => {
    const el = e.target.closest(sel);
    if (!el || (root.classList.contains('dragging'))) return;
    tip.innerHTML = tipText(Number(el.dataset.i)); tip.hidden = false;
  });
  root.addEventListener('mousemove', (e) => {
    if (tip.hidden) return;
    const w = tip.offsetWidth;
    tip.style.left = Math.min(window.innerWidth - w - 8, e.clientX + 14) + 'px';
    tip.style.top = (e.clientY + 14) + 'px';
  });
  root.addEventListener('mouseout', (e) => { if (e.target.closest(sel)) hideTip(); });
}

// ---------------------------------------------------------------- fitness plot
const plotSvg = $('#plot');
hover(plotSvg, '[data-i]');
plotSvg.addEventListener('click', (e) => {
  const el = e.target.closest('[data-i]');
  if (el) select(Number(el.dataset.i), {from: 'plot'});
});
function niceTicks(lo, hi, n) {
  const span = hi - lo || 1, step0 = span / n, mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= n) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}
function drawPlot() {
  const W = Math.max(420, plotSvg.clientWidth || 800), H = 350;
  const L = 74, Rm = 16, T = 12, main = 232, gap = 22, strip = 34, B = H - T - main - gap - strip;
  const its = P.map((p) => p.it);
  const x0 = Math.min(0, ...its), x1 = Math.max(1, ...its);
  const X = (it) => L + (it - x0) / (x1 - x0 || 1) * (W - L - Rm);
  const okIdx = [], failed = [], mfail = [];
  for (let i = 0; i < N; i++) {
    if (!match[i]) continue;
    if (P[i].f !== null && P[i].f !== undefined) okIdx.push(i);
    else if (P[i].s === 'mutation_failed') mfail.push(i); else failed.push(i);
  }
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < N; i++) {
    if (P[i].f === null || P[i].f === undefined) continue;
    const v = shown(P[i].f);
    lo = Math.min(lo, v); hi = Math.max(hi, v);
  }
  if (!isFinite(lo)) { lo = 0; hi = 1; }
  if (hi - lo < 1e-12) { lo -= NEG ? 0.5 : Math.abs(lo) * 0.05 + 0.5; hi += NEG ? 0.5 : Math.abs(hi) * 0.05 + 0.5; }
  const padv = (hi - lo) * 0.06; lo -= padv; hi += padv;
  const Y = (v) => T + main - (v - lo) / (hi - lo) * main;
  let s = '';
  // grid and y axis
  let ticks;
  if (NEG) {
    ticks = [];
    const span = hi - lo, stepE = Math.max(1, Math.ceil(span / 6));
    for (let e = Math.ceil(lo); e <= hi; e += stepE) ticks.push(e);
    if (ticks.length < 2) { ticks = niceTicks(lo, hi, 4); }
  } else ticks = niceTicks(lo, hi, 5);
  s += '<g class="grid">';
  for (const t of ticks) s += `<line x1="${L}" x2="${W - Rm}" y1="${Y(t).toFixed(1)}" y2="${Y(t).toFixed(1)}"/>`;
  s += '</g><g class="axis">';
  s += `<line x1="${L}" x2="${L}" y1="${T}" y2="${T + main}"/>`;
  for (const t of ticks) {
    const txt = NEG ? (Number.isInteger(t) ? '1e' + t : fmt(Math.pow(10, t))) : fmt(t);
    s += `<text x="${L - 6}" y="${(Y(t) + 4).toFixed(1)}" text-anchor="end">${txt}</text>`;
  }
  const ylab = NEG ? '\u2212fitness (exploitability), log, lower is better' : 'fitness, higher is better';
  s += `<text class="title" transform="translate(14,${T + main / 2}) rotate(-90)" text-anchor="middle">${ylab}</text>`;
  // x axis under the strip
  const xa = T + main + gap + strip + 4;
  s += `<line x1="${L}" x2="${W - Rm}" y1="${xa}" y2="${xa}"/>`;
  for (const t of niceTicks(x0, x1, Math.max(3, Math.floor((W - L) / 90)))) {
    if (!Number.isInteger(t)) continue;
    s += `<line x1="${X(t)}" x2="${X(t)}" y1="${xa}" y2="${xa + 4}"/>` +
      `<text x="${X(t)}" y="${xa + 15}" text-anchor="middle">${t}</text>`;
  }
  s += `<text class="title" x="${(L + W - Rm) / 2}" y="${H - 4}" text-anchor="middle">iteration</text></g>`;
  // best so far among the programs shown
  let best = null, d = '';
  const order = okIdx.slice().sort((a, b) => P[a].it - P[b].it);
  for (const i of order) {
    if (best === null || P[i].f > best) {
      const y = Y(shown(P[i].f));
      d += (best === null ? `M${X(P[i].it)},${y}` : `H${X(P[i].it)}V${y}`);
      best = P[i].f;
    }
  }
  if (best !== null) d += `H${X(x1)}`;
  s += `<path class="bestline" d="${d}"/>`;
  // points
  s += '<g>';
  for (const i of okIdx) {
    const d = shape(P[i].is, 3.6, +X(P[i].it).toFixed(1), +Y(shown(P[i].f)).toFixed(1));
    s += `<path class="pt" data-i="${i}" d="${d}" fill="${fills[i]}"/>`;
  }
  s += '</g>';
  // failures, apart
  const sy = T + main + gap;
  s += `<line x1="${L}" x2="${W - Rm}" y1="${sy - 8}" y2="${sy - 8}" stroke="#eaeef2"/>`;
  s += `<text x="${L - 6}" y="${sy + 8}" text-anchor="end">evaluation</text>`;
  s += `<text x="${L - 6}" y="${sy + 26}" text-anchor="end">mutation</text>`;
  s += `<text x="${L}" y="${sy - 11}" class="title" style="font-size:11px">failures</text>`;
  for (const i of failed) {
    const x = X(P[i].it), y = sy + 4;
    s += `<path class="fail" data-i="${i}" d="M${x - 3.5},${y - 3.5}l7,7m0,-7l-7,7"/>`;
  }
  for (const i of mfail) { const x = X(P[i].it); s += `<path class="mfail" data-i="${i}" d="M${x},${sy + 17}v10"/>`; }
  // rings: the returned program, and the selection (redrawn alone when it changes)
  plotRing = (i, colour, r) => {
    if (i === null || P[i].f === null || P[i].f === undefined || !match[i]) return '';
    return `<circle class="ringp" cx="${X(P[i].it)}" cy="${Y(shown(P[i].f))}" r="${r}" stroke="${colour}"/>`;
  };
  s += plotRing(BEST, 'var(--best)', 7.5) + '<g class="selring"></g>';
  plotSvg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  plotSvg.innerHTML = s;
  markPlot();
}
let plotRing = () => '';
function markPlot() {
  const g = plotSvg.querySelector('.selring');
  if (g) g.innerHTML = plotRing(state.sel, 'var(--accent)', 6);
}

function buildLegends() {
  const bar = `linear-gradient(to right, ${VIRIDIS.join(',')})`;
  const lo = NEG ? fmt(-Math.pow(10, -gLo)) : fmt(gLo), hi = NEG ? fmt(-Math.pow(10, -gHi)) : fmt(gHi);
  const have = isFinite(gLo);
  let html = have ? `<span class="sw">fitness ${lo} <span class="bar" style="background:${bar}"></span> ${hi}</span>` : '';
  html += `<span class="sw">${swatchDot('#c9d1d9')}evaluation failed</span>`;
  html += `<span class="sw">${swatchDot('#fff', 'stroke-dasharray="2 2"')}mutation failed</span>`;
  html += `<span class="sw">${swatchLine('#d4380d', 6, 'opacity=".5"')}returned program's lineage</span>`;
  html += `<span class="sw">${swatchLine('#0969da', 2)}selected program's lineage</span>`;
  html += `<span class="sw">${swatchLine('#0969da', 1.6, 'stroke-dasharray="5 3"')}its second parent (crossover)</span>`;
  html += '<span class="sw">shape: island (see the filters)</span>';
  $('#tree-legend').innerHTML = html;
  $('#plot-legend').innerHTML =
    `<span class="sw">${swatchLine('#d4380d', 2)}best so far (programs shown)</span>`;
}

// ---------------------------------------------------------------- table
const table = $('#programs');
const COLS = [
  ['it', '#', true, (i) => P[i].it],
  ['id', 'id', false, (i) => P[i].id],
  ['is', 'island', true, (i) => P[i].is],
  ['op', 'operator', false, (i) => P[i].op],
  ['s', 'status', false, (i) => P[i].s],
  ['f', 'fitness', true, (i) => P[i].f],
  ['dp', '\u0394 parent', true, (i) => delta(i)],
  ['g', 'gen.', true, (i) => P[i].g],
  ['p', 'parent', true, (i) => (isRoot(i) ? null : P[P[i].p].it)],
];
function delta(i) {
  const p = P[i];
  if (isRoot(i) || p.f === null || p.f === undefined) return null;
  const q = P[p.p].f;
  return q === null || q === undefined ? null : p.f - q;
}
table.addEventListener('click', (e) => {
  const th = e.target.closest('th[data-k]');
  if (th) {
    const k = th.dataset.k;
    state.sortDir = state.sortKey === k ? -state.sortDir : (k === 'f' || k === 'dp' ? -1 : 1);
    state.sortKey = k; drawTable(); return;
  }
  const tr = e.target.closest('tr[data-i]');
  if (tr) select(Number(tr.dataset.i), {from: 'table'});
});
$('#table-search').addEventListener('input', (e) => {
  state.search = e.target.value.trim().toLowerCase();
  state.limit = 100;
  drawTable();
});
function drawTable() {
  const col = COLS.find((c) => c[0] === state.sortKey), get = col[3], dir = state.sortDir;
  const q = state.search;
  const rows = [];
  for (let i = 0; i < N; i++) {
    if (!match[i]) continue;
    if (q && !(P[i].id.toLowerCase().includes(q) || String(P[i].it) === q.replace(/^#/, ''))) continue;
    rows.push(i);
  }
  rows.sort((a, b) => {
    const va = get(a), vb = get(b);
    if (va === vb) return P[a].it - P[b].it;
    if (va === null || va === undefined) return 1;
    if (vb === null || vb === undefined) return -1;
    return (va < vb ? -1 : 1) * dir;
  });
  let html = '<thead><tr>';
  for (const [k, name, num] of COLS) {
    const arrow = state.sortKey === k ? (dir > 0 ? ' \u25b2' : ' \u25bc') : '';
    html += `<th class="sortable${num ? ' num' : ''}" data-k="${k}">${name}${arrow}</th>`;
  }
  html += '</tr></thead><tbody>';
  const shownRows = rows.slice(0, state.limit);
  for (const i of shownRows) {
    const p = P[i], dp = delta(i);
    const cls = (i === state.sel ? 'sel ' : '') + (i === BEST ? 'best' : '');
    html += `<tr data-i="${i}" class="${cls}"><td class="num">${p.it}</td><td class="mono">${esc(p.id)}</td>` +
      `<td class="num">${glyphInline(p.is)} ${p.is}</td><td>${esc(p.op)}</td>` +
      `<td><span class="badge ${p.s}">${STATUS[p.s]}</span></td><td class="num">${fmt(p.f)}</td>` +
      `<td class="num ${dp > 0 ? 'up' : dp < 0 ? 'down' : ''}">${dp === null ? '' : (dp > 0 ? '+' : '') + fmt(dp)}</td>` +
      `<td class="num">${p.g}</td><td class="num">${isRoot(i) ? '' : '#' + P[p.p].it}</td></tr>`;
  }
  html += '</tbody>';
  table.innerHTML = html;
  const more = $('#table-more');
  if (rows.length > shownRows.length) {
    more.innerHTML = `${shownRows.length} of ${rows.length} rows <button type="button" id="more-rows">show 500 more</button>` +
      `<button type="button" id="all-rows">show all</button>`;
    $('#more-rows').onclick = () => { state.limit += 500; drawTable(); };
    $('#all-rows').onclick = () => { state.limit = Infinity; drawTable(); };
  } else more.textContent = `${rows.length} rows`;
}
const glyphCache = {};
function glyphInline(k) { return glyphCache[k] || (glyphCache[k] = glyph(k, '#d0d7de', 11)); }

// ---------------------------------------------------------------- code, rebuilt on demand from the line edits
const codeCache = new Map();
function lines(i) {
  if (codeCache.has(i)) return codeCache.get(i);
  const chain = [];
  let j = i;
  while (P[j].c === undefined && !codeCache.has(j)) { chain.push(j); j = P[j].p; }
  let cur = codeCache.has(j) ? codeCache.get(j) : P[j].c.split('\n');
  codeCache.set(j, cur);
  for (let k = chain.length - 1; k >= 0; k--) {
    cur = patch(cur, P[chain[k]].d);
    codeCache.set(chain[k], cur);
  }
  return cur;
}
function patch(a, edits) {
  const out = [];
  let pos = 0;
  for (const [i1, i2, add] of edits) {
    for (let k = pos; k < i1; k++) out.push(a[k]);
    for (const l of add) out.push(l);
    pos = i2;
  }
  for (let k = pos; k < a.length; k++) out.push(a[k]);
  return out;
}
// Line edits between any two programs (longest common subsequence after the common ends), for seed and donor.
function lineEdits(a, b) {
  let s = 0, ea = a.length, eb = b.length;
  while (s < ea && s < eb && a[s] === b[s]) s++;
  while (ea > s && eb > s && a[ea - 1] === b[eb - 1]) { ea--; eb--; }
  const n = ea - s, m = eb - s;
  if (n === 0 && m === 0) return [];
  if (n * m > 4e6) return [[s, ea, b.slice(s, eb)]];
  const w = m + 1, L = new Uint32Array((n + 1) * w);
  for (let x = n - 1; x >= 0; x--) {
    for (let y = m - 1; y >= 0; y--) {
      L[x * w + y] = a[s + x] === b[s + y] ? L[(x + 1) * w + y + 1] + 1 : Math.max(L[(x + 1) * w + y], L[x * w + y + 1]);
    }
  }
  const edits = [];
  let x = 0, y = 0, cur = null;
  const flush = () => { if (cur) { edits.push(cur); cur = null; } };
  while (x < n || y < m) {
    if (x < n && y < m && a[s + x] === b[s + y]) { flush(); x++; y++; }
    else if (y < m && (x === n || L[x * w + y + 1] >= L[(x + 1) * w + y])) {
      if (!cur) cur = [s + x, s + x, []]; cur[2].push(b[s + y]); y++;
    } else { if (!cur) cur = [s + x, s + x, []]; cur[1] = s + x + 1; x++; }
  }
  flush();
  return edits;
}
// A unified diff (3 lines of context) from line edits, as difflib writes it.
function unified(a, edits, ctx = 3) {
  if (!edits.length) return [];
  const hunks = [];
  let h = null, shift = 0;
  for (const e of edits) {
    const j1 = e[0] + shift;
    if (h && e[0] - h.last <= 2 * ctx) h.edits.push([e, j1]); else { h = {edits: [[e, j1]]}; hunks.push(h); }
    h.last = e[1];
    shift += e[2].length - (e[1] - e[0]);
  }
  const out = [];
  for (const hk of hunks) {
    const first = hk.edits[0], lastE = hk.edits[hk.edits.length - 1][0];
    const a0 = Math.max(0, first[0][0] - ctx), a1 = Math.min(a.length, lastE[1] + ctx);
    const b0 = first[1] - (first[0][0] - a0);
    const body = [];
    let pos = a0, bLen = 0;
    for (const [e] of hk.edits) {
      for (let k = pos; k < e[0]; k++) { body.push([' ', a[k]]); bLen++; }
      for (let k = e[0]; k < e[1]; k++) body.push(['-', a[k]]);
      for (const l of e[2]) { body.push(['+', l]); bLen++; }
      pos = e[1];
    }
    for (let k = pos; k < a1; k++) { body.push([' ', a[k]]); bLen++; }
    const range = (start, len) => (len === 1 ? `${start + 1}` : `${len ? start + 1 : start},${len}`);
    out.push(['@', `@@ -${range(a0, a1 - a0)} +${range(b0, bLen)} @@`]);
    out.push(...body);
  }
  return out;
}

// ---------------------------------------------------------------- details
const details = $('#details');
function program(i) { return `<button type="button" class="link" data-open="${i}">${esc(label(i))}</button>`; }
function select(i, opts = {}) {
  if (i === null || i === undefined || i < 0 || i >= N) return;
  state.sel = i;
  if (!(opts.keepTab)) state.against = 'parent';
  tree.mark(i);
  if (opts.from !== 'tree') tree.reveal(i);
  markPlot();
  table.querySelectorAll('tr.sel').forEach((tr) => tr.classList.remove('sel'));
  const tr = table.querySelector(`tr[data-i="${i}"]`);
  if (tr) {
    tr.classList.add('sel');
    // Scroll the table's own box only: the page stays where the user is.
    const wrap = table.parentElement, wr = wrap.getBoundingClientRect(), rr = tr.getBoundingClientRect();
    const hidden = rr.top < wr.top + 26 || rr.bottom > wr.bottom;
    if (opts.from !== 'table' && hidden) wrap.scrollTop += rr.top - wr.top - wr.height / 2;
  }
  drawDetails();
  if (!opts.noHash) history.replaceState(null, '', '#' + encodeURIComponent(P[i].id));
}
function drawDetails() {
  const i = state.sel;
  if (i === null) {
    details.innerHTML = '<div class="d-head"><h2>No program selected</h2><p class="empty">Click a program in the ' +
      'lineage tree, the fitness plot or the table to see its code, its diff against its parent, its metrics ' +
      'and artifacts.</p></div>';
    return;
  }
  const p = P[i];
  const badges = `<span class="badge ${p.s}">${STATUS[p.s]}</span>` +
    (i === BEST ? '<span class="badge best">returned program</span>' : '') +
    (i === TOP && TOP !== BEST ? '<span class="badge top">best training fitness</span>' : '') +
    (p.sa ? `<span class="badge partial" title="ranked only against programs stopped at the same stage">` +
      `stopped after ${esc(p.sa)}</span>` : '');
  let kv = `<dt>fitness</dt><dd><b>${fmt(p.f)}</b>`;
  const dp = delta(i);
  if (dp !== null) kv += ` <span class="${trend(dp)}">(${signed(dp)} on its parent)</span>`;
  kv += '</dd>';
  if (p.v !== undefined) kv += `<dt>validation</dt><dd>${fmt(p.v)}</dd>`;
  kv += `<dt>operator</dt><dd><b>${esc(p.op)}</b>`;
  const mu = p.mu || {};
  const extra = Object.keys(mu).filter((k) => k !== 'donor_id' && k !== 'cmaes');
  const show = (v) => (typeof v === 'object' ? JSON.stringify(v) : v);
  if (extra.length) kv += ' \u00b7 ' + extra.map((k) => `${esc(k)}: ${esc(show(mu[k]))}`).join(' \u00b7 ');
  kv += '</dd>';
  if (p.x !== undefined) kv += `<dt>second parent</dt><dd>${program(p.x)} <span class="mono">${esc(P[p.x].id)}</span></dd>`;
  else if (mu.donor_id) kv += `<dt>second parent</dt><dd class="mono">${esc(mu.donor_id)}</dd>`;
  kv += `<dt>island</dt><dd>${glyph(p.is, fills[i], 12)} island ${p.is}</dd>`;
  kv += `<dt>iteration</dt><dd>${p.it} \u00b7 generation ${p.g}${p.t ? ' \u00b7 evaluated in ' + fmt(p.t) + ' s' : ''}</dd>`;
  const parent = isRoot(i) ? '\u2013 (a seed program)' : `${program(p.p)} <span class="mono">${esc(P[p.p].id)}</span>`;
  kv += `<dt>parent</dt><dd>${parent}</dd>`;
  const ch = kids[i];
  if (ch.length) {
    const okKids = ch.filter((k) => P[k].s === 'ok').length;
    const some = ch.slice(0, 12).map(program).join(' ') + (ch.length > 12 ? ' \u2026' : '');
    kv += `<dt>children</dt><dd>${ch.length} (${okKids} ok): ${some}</dd>`;
  }
  const failure = p.a && p.a.failure;
  const l = lineage(i);
  let crumbs = '';
  const crumb = (j) => `<span class="c${j === i ? ' here' : ''}" data-open="${j}" ` +
    `title="${esc(P[j].id)} \u00b7 ${esc(P[j].op)} \u00b7 fitness ${fmt(P[j].f)}">${esc(label(j))}</span>`;
  const skipped = `<span class="arrow">\u2026 ${l.length - 11} more \u2026</span>`;
  const parts = l.length > 14 ? [...l.slice(0, 3).map(crumb), skipped, ...l.slice(-8).map(crumb)] : l.map(crumb);
  crumbs = parts.join('<span class="arrow">\u2192</span>');
  const tabs = [['diff', 'Diff'], ['code', 'Code'], ['metrics', 'Metrics'], ['artifacts', 'Artifacts']];
  details.innerHTML = `<div class="d-head"><h2>Program ${esc(label(i))} <span class="pid">${esc(p.id)}</span> ${badges}</h2>` +
    `<dl class="kv">${kv}</dl>` + (failure ? `<div class="failure">${esc(failure)}</div>` : '') +
    `<div class="crumbs" title="lineage from its seed"><span class="arrow">lineage:</span>${crumbs}</div></div>` +
    '<div class="tabs" role="tablist">' +
    tabs.map(([k, n]) => `<button type="button" data-tab="${k}" class="${state.tab === k ? 'on' : ''}">${n}</button>`).join('') +
    '</div>' +
    `<div class="tab-body" id="tab-body"></div>`;
  drawTab();
}
details.addEventListener('click', (e) => {
  const t = e.target.closest('[data-tab]');
  if (!t) return;
  state.tab = t.dataset.tab;
  details.querySelectorAll('[data-tab]').forEach((b) => b.classList.toggle('on', b === t));
  drawTab();
});
document.addEventListener('click', (e) => {
  const o = e.target.closest('[data-open]');
  if (o) select(Number(o.dataset.open), {keepTab: true});
});
function seedOf(i) { return lineage(i)[0]; }
function drawTab() {
  const body = $('#tab-body'), i = state.sel, p = P[i];
  if (state.tab === 'code') {
    const ls = lines(i);
    let html = '';
    for (const l of ls) html += `<span class="l${/#\s*EVOLVE-BLOCK-(START|END)/.test(l) ? ' blk' : ''}">${esc(l)}</span>`;
    body.innerHTML = `<div class="tab-tools">${ls.length} lines</div><pre class="code" id="code">${html}</pre>`;
  } else if (state.tab === 'diff') {
    const opts = [];
    if (!isRoot(i)) opts.push(['parent', 'its parent ' + label(p.p)]);
    if (p.x !== undefined) opts.push(['donor', 'its second parent ' + label(p.x)]);
    if (seedOf(i) !== i && !(seedOf(i) === p.p)) opts.push(['seed', 'its seed ' + label(seedOf(i))]);
    if (!opts.length) {
      body.innerHTML = '<p class="empty">A seed program: it has no parent to compare with (see Code).</p>';
      return;
    }
    if (!opts.some((o) => o[0] === state.against)) state.against = opts[0][0];
    const other = state.against === 'parent' ? p.p : state.against === 'donor' ? p.x : seedOf(i);
    const a = lines(other), b = lines(i);
    const edits = state.against === 'parent' && p.d !== undefined ? p.d : lineEdits(a, b);
    const hunks = unified(a, edits);
    let html = `<span class="l file">--- ${esc(label(other))} ${esc(P[other].id)}</span>` +
      `<span class="l file">+++ ${esc(label(i))} ${esc(p.id)}</span>`;
    for (const [t, l] of hunks) {
      const cls = t === '@' ? 'hunk' : t === '+' ? 'add' : t === '-' ? 'del' : '';
      html += `<span class="l ${cls}">${esc(t === '@' ? l : t + l)}</span>`;
    }
    const none = p.s === 'mutation_failed' ?
      'No change: the mutation failed, so this record holds its parent\u2019s code.' : 'The code is identical.';
    const option = ([k, n]) => `<option value="${k}"${k === state.against ? ' selected' : ''}>${esc(n)}</option>`;
    const sel = `compare with <select id="against">${opts.map(option).join('')}</select>`;
    const added = hunks.filter((h) => h[0] === '+').length, removed = hunks.filter((h) => h[0] === '-').length;
    const counts = `<span><span class="up">+${added}</span> <span class="down">\u2212${removed}</span> lines</span>`;
    body.innerHTML = `<div class="tab-tools">${sel}${counts}</div>` +
      (hunks.length ? `<pre class="diff" id="diff">${html}</pre>` : `<p class="empty" id="diff">${none}</p>`);
    $('#against').addEventListener('change', (e) => { state.against = e.target.value; drawTab(); });
  } else if (state.tab === 'metrics') {
    if (!p.m) { body.innerHTML = '<p class="empty">No metrics: the program was not evaluated successfully.</p>'; return; }
    const par = !isRoot(i) ? P[p.p].m : null;
    let html = '<table class="grid"><thead><tr><th>metric</th>' +
      heads(['value', ...(par ? [`parent ${esc(label(p.p))}`, '\u0394'] : [])]) + '</tr></thead><tbody>';
    MN.forEach((name, k) => {
      const v = p.m[k];
      if (v === null || v === undefined) return;
      const q = par ? par[k] : null, dd = q === null || q === undefined ? null : v - q;
      html += `<tr><td class="mono">${esc(name)}</td><td class="num">${fmt(v)}</td>` +
        (par ? `<td class="num">${fmt(q)}</td><td class="num ${trend(dd)}">${signed(dd)}</td>` : '') + '</tr>';
    });
    html += '</tbody></table>';
    if (p.ss) {
      const stages = Object.entries(p.ss).map(([k, v]) => `${esc(k)} ${fmt(v)}`).join(' \u00b7 ');
      html += `<p class="empty">Cascade stages: ${stages}</p>`;
      if (p.sa) html += `<p class="empty">The cascade stopped it after ${esc(p.sa)}: its fitness is ` +
        'from the stages up to there, so it ranks only against programs stopped at the same stage.</p>';
    }
    body.innerHTML = html;
  } else {
    const a = p.a || {};
    const keys = Object.keys(a);
    if (!keys.length) { body.innerHTML = '<p class="empty">No artifacts.</p>'; return; }
    body.innerHTML = '<div class="art">' + keys.map((k) => `<h4>${esc(k)}</h4><pre>${esc(a[k])}</pre>`).join('') + '</div>';
  }
}

// ---------------------------------------------------------------- held-out and statistics
function buildHeldOut() {
  const H = D.heldOut;
  if (!H) return;
  const card = $('#held-out-card');
  const names = [...new Set(H.flatMap((e) => Object.keys(e.metrics)))].filter((n) => n !== 'combined_score').sort();
  const best = {};
  for (const n of [...names, '__score']) {
    const vals = H.filter((e) => e.status === 'ok').map((e) => (n === '__score' ? e.score : e.metrics[n]))
      .filter((v) => v !== null && v !== undefined);
    best[n] = vals.length ? Math.max(...vals) : null;
  }
  const br = (n) => esc(n).replace(/_/g, '_<wbr>');
  let html = '<div class="card-head"><h2>Held-out set</h2></div><div class="body">' +
    '<p>Scored after the search by the task\u2019s <code>evaluate_held_out</code> (never used for selection); ' +
    'higher is better, the best of each column in bold.</p>' +
    '<table class="grid compact" id="held-out"><thead><tr><th>program</th><th>kind</th>' +
    names.map((n) => `<th class="num metric">${br(n)}</th>`).join('') + '<th class="num">mean</th></tr></thead><tbody>';
  const index = new Map(P.map((p, i) => [p.id, i]));
  for (const e of H) {
    const at = e.program !== null && index.has(e.program) ? index.get(e.program) : null;
    const name = at !== null ? `<button type="button" class="link" data-open="${at}">${esc(e.label)}</button>` : esc(e.label);
    html += `<tr><td>${name}</td><td>${esc(e.kind)}</td>`;
    if (e.status !== 'ok') {
      const why = (e.failure || '').split('\n')[0].slice(0, 120);
      html += `<td colspan="${names.length + 1}" class="down" title="${esc(e.failure || '')}">failed: ${esc(why)}</td></tr>`;
      continue;
    }
    for (const n of names) {
      const v = e.metrics[n];
      html += `<td class="num${v !== undefined && v === best[n] ? ' bold' : ''}">${fmt(v)}</td>`;
    }
    html += `<td class="num${e.score === best.__score ? ' bold' : ''}">${fmt(e.score)}</td></tr>`;
  }
  html += '</tbody></table>';
  const M = D.means;
  if (M) {
    const rows = [...new Set([...Object.keys(M.training_mean || {}), ...Object.keys(M.held_out_mean || {})])];
    if (rows.length) {
      html += '<h3 style="font-size:13px;margin:14px 0 4px">Means per set</h3>' +
        '<table class="grid compact" id="means"><thead><tr><th>program</th>' +
        heads(['training mean', 'validation mean', 'held-out mean']) + '</tr></thead><tbody>';
      for (const r of rows) {
        html += `<tr><td>${esc(r)}</td><td class="num">${fmt((M.training_mean || {})[r])}</td>` +
          `<td class="num">${fmt((M.validation_mean || {})[r])}</td><td class="num">${fmt((M.held_out_mean || {})[r])}</td></tr>`;
      }
      html += '</tbody></table>';
    }
  }
  card.innerHTML = html + '</div>';
  card.hidden = false;
}
function buildStats() {
  const I = D.islands, O = D.operators;
  if (!I && !O) return;
  const card = $('#stats-card');
  let html = '<div class="card-head"><h2>Islands and operators</h2></div><div class="body stats">';
  if (I) {
    html += '<div><h3>Islands (MAP-Elites, at the end of the run)</h3><table class="grid compact"><thead><tr>' +
      heads(['island', 'members', 'cells filled', 'best fitness', 'mean fitness']) + '</tr></thead><tbody>';
    for (const s of I) {
      html += `<tr><td class="num">${glyphInline(s.island)} ${s.island}</td>` +
        nums([s.members, s.cells, fmt(s.best_fitness), fmt(s.mean_fitness)]) + '</tr>';
    }
    html += '</tbody></table></div>';
  }
  if (O) {
    html += '<div><h3>Operators</h3><table class="grid compact"><thead><tr><th>kind</th><th class="num">children</th>' +
      '<th class="num">valid</th><th class="num">evaluated</th><th class="num">improved on parent</th></tr></thead><tbody>';
    for (const k of Object.keys(O).sort()) {
      const r = O[k];
      html += `<tr><td>${esc(k)}</td>${nums([r.children, r.valid, r.evaluated, r.improved])}</tr>`;
    }
    html += '</tbody></table></div>';
  }
  card.innerHTML = html + '</div>';
  card.hidden = false;
}

// ---------------------------------------------------------------- start
buildHeader();
buildFilters();
buildLegends();
applyFilters();
tree.initial();
tree.filter();
drawPlot();
drawTable();
buildHeldOut();
buildStats();
let first = null;
if (location.hash.length > 1) {
  const id = decodeURIComponent(location.hash.slice(1));
  first = P.findIndex((p) => p.id === id);
  if (first < 0) first = null;
}
if (first === null) first = BEST;
if (first !== null) select(first, {noHash: true});
else drawDetails();
let resize = null;
window.addEventListener('resize', () => {
  clearTimeout(resize);
  resize = setTimeout(() => { drawPlot(); tree.relayout(); }, 120);
});
document.documentElement.dataset.ready = String(Math.round(performance.now() - T0));
})();
"""

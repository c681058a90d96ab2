"""One self-contained HTML page that steps through a run message by message: ``trace.html``.

:func:`write_trace_html` (and :func:`trace_to_html`, which returns the text)
turns a :class:`~societas.topology.trace.Trace` — a saved JSONL trace, or the
traces of :meth:`Runtime.run_many <societas.topology.runtime.Runtime.run_many>`
— into one file whose CSS, JavaScript and SVG are inline: nothing is fetched,
so it opens from ``file://`` on a machine without network. The page shows

* the graph as SVG, laid out here in Python (the topological layers of the
  flow, a cycle on a circle, as :func:`~societas.topology.render.layout_positions`
  places them): agent nodes coloured by role, function, tool, interrupt and
  subgraph nodes by shape, the final node bold, static edges solid, a router's
  edges dashed (faint while never taken), ``END`` as a circle. The selected
  event's node is outlined, the edges its message went along drawn orange and
  the ones its inputs came along blue;
* every event of the trace in order (the steps list), and the same events on
  a timeline with a lane per node and a column per superstep. Column and bar
  widths follow the latencies the trace recorded; the order within a step is
  the Runtime's (the step's batched model calls one after another, then
  Python, interrupt and subgraph nodes, then routers). Agent turns that
  shared one batched ``generate`` call (same step, model, latency and
  ``batch_size``) are one batch: a band on the timeline, a badge in the list,
  and links between the members — across the tasks of a ``run_many`` too;
* the details of the selected event: the prompt turn by turn, the output,
  tokens, latency and batch; a router's choice among its targets (with an LLM
  router's answer, a learned router's probabilities); a tool call's arguments
  and result; the tool calls of an agent's tool-loop turn; a subgraph's own
  events; or, for a selected node, its spec and its events.

Click an event, a timeline bar or a node; ``→``/``↓``/``j`` and ``←``/``↑``/``k``
step through the events, ``Home``/``End`` jump. Trace text is only ever set
as text in the page (never parsed as HTML), and the embedded JSON escapes
``<``, ``>`` and ``&``, so a prompt holding ``</script>`` cannot break it.
"""

from __future__ import annotations

import html
import json
import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from societas.agents.documents import escape_script_json

from .graph import Graph, topological_layers_of
from .render import layout_positions
from .routing import END
from .spec import RouterSpec
from .trace import Trace, TraceEvent

log = logging.getLogger(__name__)

__all__ = ["TraceSource", "trace_to_html", "write_trace_html"]

TraceSource = Trace | Sequence[Trace] | str | os.PathLike[str]
"""What the page is made from: a trace, several (one per task of a ``run_many``), or a JSONL file."""

# Fill colours of agent nodes, one per role in order of appearance (then reused), and of the other kinds.
_ROLE_FILLS = (
    "#cfe2f7", "#d6efd0", "#fde0c5", "#e3d9f3", "#f9d5e1", "#fff0a8", "#cdeeea", "#eadccd",
    "#dfe6ec", "#f3dcd4",
)  # fmt: skip
_KIND_FILLS = {
    "function": "#eef1ee",
    "tool": "#fff2dc",
    "interrupt": "#fde3ec",
    "graph": "#ece6f6",
    "end": "#d9d9d9",
}
_NOT_MESSAGES = ("router", "tool_call")
# Text metrics of the node labels (px): the estimate is generous, so that no label leaves its box.
_ID_FONT, _SUB_FONT = 13.0, 11.5
_CHAR_W = 0.64  # width of one character, in units of the font size (bold DejaVu Sans is about 0.62)
_LINE_H = 16.0
_MAX_CHARS = 24
_END_R = 22.0


def _is_message(ev: TraceEvent) -> bool:
    """A node's output that its receivers read: not a router's decision, a tool call, an agent's
    intermediate tool-loop turn, or an interrupt still waiting for its answer."""
    waiting = ev.kind == "interrupt" and bool(ev.meta.get("waiting"))
    return ev.kind not in _NOT_MESSAGES and not ev.meta.get("partial") and not waiting


# ---------------------------------------------------------------------------
# The drawing's nodes and edges
# ---------------------------------------------------------------------------


@dataclass
class _Node:
    id: str
    kind: str
    role: str | None = None
    llm: str | None = None
    tools: list[str] = field(default_factory=list)
    router: str | None = None
    prompt: str | None = None
    function: str | None = None
    final: bool = False
    in_graph: bool = False
    # False while the kind is a guess (the node was only a receiver so far); its own message settles it.
    known: bool = True

    def lines(self) -> list[str]:
        """``id``, role (or kind), then tools or router when there are any."""
        out = [self.id]
        if self.kind == "end":
            return out
        out.append(self.role or self.kind)
        if self.tools:
            out.append("tools: " + ", ".join(self.tools))
        elif self.router:
            out.append(self.router)
        return out


@dataclass
class _Edge:
    source: str
    target: str
    router: bool = False
    label: str | None = None
    in_graph: bool = False
    messages: int = 0
    tokens: int = 0
    taken: int = 0

    @property
    def used(self) -> bool:
        return self.messages > 0 or self.taken > 0

    def title(self) -> str:
        parts = [f"{self.source} → {self.target}"]
        if self.router:
            parts.append("router edge" + (f" ({self.label})" if self.label else ""))
            parts.append(f"chosen {self.taken}×")
        elif self.label:
            parts.append(self.label)
        parts.append(f"{self.messages} message{'s' if self.messages != 1 else ''}, {self.tokens} tokens")
        return "; ".join(parts)


def _router_text(r: RouterSpec) -> str:
    if r.kind == "function":
        who = f"{r.function}()"
    elif r.kind == "router":
        who = str(r.router)
    else:
        who = "llm" if r.llm == "default" else f"llm {r.llm}"
    return f"router: {who}" + (" (multi)" if r.multi else "")


def _model(traces: Sequence[Trace], graph: Graph | None) -> tuple[dict[str, _Node], list[_Edge]]:
    """Every node and edge the graph or the traces name: graph order first, then order of appearance."""
    nodes: dict[str, _Node] = {}
    edges: dict[tuple[str, str], _Edge] = {}
    if graph is not None:
        final = graph.final if len(graph) else None
        for nid in graph.nodes:
            spec = graph.node(nid)
            router = graph.routers.get(nid)
            nodes[nid] = _Node(
                nid,
                spec.kind,
                spec.role,
                spec.llm if spec.kind == "agent" else None,
                list(spec.tools),
                _router_text(router) if router is not None else None,
                spec.prompt,
                spec.function,
                nid == final,
                in_graph=True,
            )
        for es in graph.spec.edges:
            edges[(es.source, es.target)] = _Edge(es.source, es.target, label=es.label or None, in_graph=True)
        for source, target, text in graph.conditional_edges():
            edges.setdefault((source, target), _Edge(source, target, True, text, in_graph=True))

    def edge(source: str, target: str, router: bool) -> _Edge:
        found = edges.get((source, target))
        if found is None:
            found = edges[(source, target)] = _Edge(source, target, router)
        return found

    for trace in traces:
        for ev in trace:
            message = _is_message(ev)
            node = nodes.get(ev.sender)
            if node is None:
                node = nodes[ev.sender] = _Node(ev.sender, ev.kind if message else "agent", known=message)
            elif message and not node.known:
                node.kind, node.known = ev.kind, True
            if node.role is None and ev.role:
                node.role = ev.role
            if ev.kind == "tool_call":
                continue  # the calling agent is its own receiver
            if ev.kind == "router":
                chosen = ev.meta.get("choices")
                picked = [str(t) for t in (chosen if chosen is not None else ev.receivers)]
                for t in [str(t) for t in ev.meta.get("allowed") or ()] + picked:
                    e = edge(ev.sender, t, True)
                    if not e.in_graph:
                        e.router = True  # a message along it came first, but a router decides it
                for t in picked:
                    edges[(ev.sender, t)].taken += 1
                continue
            if message:
                for receiver in ev.receivers:
                    e = edge(ev.sender, receiver, False)
                    e.messages += 1
                    e.tokens += ev.completion_tokens
    for e in edges.values():
        for end in (e.source, e.target):
            if end not in nodes:
                nodes[end] = _Node(end, "end", known=True) if end == END else _Node(end, "agent", known=False)
    if END in nodes and nodes[END].kind == "end":
        nodes[END] = nodes.pop(END)  # the terminal goes last
    return nodes, list(edges.values())


def _role_fills(nodes: dict[str, _Node]) -> dict[str, str]:
    roles: dict[str, str] = {}
    for n in nodes.values():
        if n.kind == "agent":
            key = n.role or ""
            if key not in roles:
                roles[key] = _ROLE_FILLS[len(roles) % len(_ROLE_FILLS)]
    return roles


def _fill(n: _Node, roles: dict[str, str]) -> str:
    if n.kind == "agent":
        return roles.get(n.role or "", _ROLE_FILLS[0])
    return _KIND_FILLS.get(n.kind, _ROLE_FILLS[0])


# ---------------------------------------------------------------------------
# Layout and SVG
# ---------------------------------------------------------------------------


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 1] + "…"


def _half_size(n: _Node) -> tuple[float, float]:
    if n.kind == "end":
        return _END_R, _END_R
    lines = [_clip(x) for x in n.lines()]
    widths = [len(lines[0]) * _ID_FONT * _CHAR_W] + [len(x) * _SUB_FONT * _CHAR_W for x in lines[1:]]
    w = max(max(widths) + 30.0, 92.0)
    h = len(lines) * _LINE_H + 16.0
    return w / 2, h / 2


@dataclass
class _Placed:
    x: float
    y: float
    hw: float
    hh: float


def _place(nodes: dict[str, _Node], edges: list[_Edge]) -> dict[str, _Placed]:
    """Pixel centres and half-sizes of the boxes."""
    dg = nx.DiGraph()
    dg.add_nodes_from(nodes)
    dg.add_edges_from((e.source, e.target) for e in edges if e.source != e.target)
    layers = topological_layers_of(dg, list(nodes))
    pos = layout_positions(layers, {(e.source, e.target) for e in edges})
    half = {nid: _half_size(n) for nid, n in nodes.items()}
    max_hw = max((h[0] for h in half.values()), default=46.0)
    max_hh = max((h[1] for h in half.values()), default=20.0)
    unit_x = 2 * max_hw + 64.0
    unit_y = 2 * max_hh + 30.0
    # SVG's y grows downwards; the drawing's bounds are taken afterwards, from boxes and curves.
    return {nid: _Placed(x * unit_x, -y * unit_y, half[nid][0], half[nid][1]) for nid, (x, y) in pos.items()}


def _border(p: _Placed, circle: bool, towards: tuple[float, float], gap: float) -> tuple[float, float]:
    """The point where the ray from ``p``'s centre towards ``towards`` leaves its box, ``gap`` further out."""
    dx, dy = towards[0] - p.x, towards[1] - p.y
    n = math.hypot(dx, dy)
    if n == 0.0:
        return p.x, p.y
    ux, uy = dx / n, dy / n
    if circle:
        d = p.hw
    else:
        d = min(p.hw / abs(ux) if ux else math.inf, p.hh / abs(uy) if uy else math.inf)
    return p.x + ux * (d + gap), p.y + uy * (d + gap)


def _quad(
    a: tuple[float, float], c: tuple[float, float], b: tuple[float, float], t: float
) -> tuple[float, float]:
    s = 1.0 - t
    return s * s * a[0] + 2 * s * t * c[0] + t * t * b[0], s * s * a[1] + 2 * s * t * c[1] + t * t * b[1]


def _hits(
    a: tuple[float, float],
    c: tuple[float, float],
    b: tuple[float, float],
    others: list[_Placed],
) -> bool:
    """Whether the curve ``a``-``c``-``b`` (quadratic) passes through one of ``others``' boxes."""
    for k in range(1, 40):
        x, y = _quad(a, c, b, k / 40)
        for p in others:
            if abs(x - p.x) <= p.hw + 6 and abs(y - p.y) <= p.hh + 6:
                return True
    return False


@dataclass
class _EdgeShape:
    d: str
    label_at: tuple[float, float]
    points: list[tuple[float, float]]  # points along the curve, for the drawing's bounds


def _edge_shape(
    e: _Edge, placed: dict[str, _Placed], nodes: dict[str, _Node], pairs: set[tuple[str, str]]
) -> _EdgeShape:
    s, t = placed[e.source], placed[e.target]
    if e.source == e.target:
        # A self-loop: an arc over the top of the box.
        top = s.y - s.hh
        x0, x1 = s.x - 14.0, s.x + 14.0
        d = f"M{x0:.1f},{top - 1:.1f} C{x0 - 22:.1f},{top - 40:.1f} {x1 + 22:.1f},{top - 40:.1f} {x1:.1f},{top - 3:.1f}"
        return _EdgeShape(d, (s.x, top - 36.0), [(x0 - 8, top - 32), (x1 + 8, top - 32)])
    a, b = (s.x, s.y), (t.x, t.y)
    dx, dy = b[0] - a[0], b[1] - a[1]
    others = [p for nid, p in placed.items() if nid not in (e.source, e.target)]
    # A pair of opposite edges bends each to its own side; any other edge bends only around a box in its way.
    rads = (0.22, 0.4, 0.6) if (e.target, e.source) in pairs else (0.0, 0.2, -0.2, 0.4, -0.4, 0.6, -0.6)
    chosen = rads[0]
    for rad in rads:
        c = ((a[0] + b[0]) / 2 + rad * dy, (a[1] + b[1]) / 2 - rad * dx)
        if not _hits(a, c, b, others):
            chosen = rad
            break
    c = ((a[0] + b[0]) / 2 + chosen * dy, (a[1] + b[1]) / 2 - chosen * dx)
    start = _border(s, nodes[e.source].kind == "end", c if chosen else b, 1.0)
    end = _border(t, nodes[e.target].kind == "end", c if chosen else a, 3.0)
    if chosen:
        d = f"M{start[0]:.1f},{start[1]:.1f} Q{c[0]:.1f},{c[1]:.1f} {end[0]:.1f},{end[1]:.1f}"
        return _EdgeShape(d, _quad(start, c, end, 0.5), [_quad(start, c, end, k / 16) for k in range(17)])
    d = f"M{start[0]:.1f},{start[1]:.1f} L{end[0]:.1f},{end[1]:.1f}"
    return _EdgeShape(d, ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2), [start, end])


def _shape(n: _Node, p: _Placed, fill: str) -> str:
    w, h, hw, hh = 2 * p.hw, 2 * p.hh, p.hw, p.hh
    style = f'fill="{fill}"'
    if n.kind == "end":
        return f'<circle class="shape" r="{_END_R:.0f}" {style}/>'
    if n.kind == "tool":
        k = 12.0
        pts = [(-hw, 0), (-hw + k, -hh), (hw - k, -hh), (hw, 0), (hw - k, hh), (-hw + k, hh)]
        return f'<polygon class="shape" points="{_points(pts)}" {style}/>'
    if n.kind == "interrupt":
        pts = [(-hw, -hh), (hw, -hh), (hw, hh), (-hw, hh), (-hw + 12, 0)]
        return f'<polygon class="shape" points="{_points(pts)}" {style}/>'
    if n.kind == "function":
        rect = f'<rect class="shape" x="{-hw:.1f}" y="{-hh:.1f}" width="{w:.1f}" height="{h:.1f}" rx="2" {style}/>'
        bars = "".join(
            f'<line class="inner" x1="{x:.1f}" y1="{-hh:.1f}" x2="{x:.1f}" y2="{hh:.1f}"/>'
            for x in (-hw + 7, hw - 7)
        )
        return rect + bars
    if n.kind == "graph":
        return (
            f'<rect class="shape" x="{-hw:.1f}" y="{-hh:.1f}" width="{w:.1f}" height="{h:.1f}" rx="14" {style}/>'
            f'<rect class="inner" x="{-hw + 4:.1f}" y="{-hh + 4:.1f}" width="{w - 8:.1f}" height="{h - 8:.1f}" '
            f'rx="10" fill="none"/>'
        )
    return (
        f'<rect class="shape" x="{-hw:.1f}" y="{-hh:.1f}" width="{w:.1f}" height="{h:.1f}" rx="8" {style}/>'
    )


def _points(pts: list[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _node_title(n: _Node) -> str:
    parts = [n.id, f"kind: {n.kind}"]
    if n.role:
        parts.append(f"role: {n.role}")
    if n.tools:
        parts.append("tools: " + ", ".join(n.tools))
    if n.router:
        parts.append(n.router)
    if n.final:
        parts.append("final node")
    return "\n".join(parts)


def _graph_svg(nodes: dict[str, _Node], edges: list[_Edge], roles: dict[str, str]) -> str:
    placed = _place(nodes, edges)
    pairs = {(e.source, e.target) for e in edges}
    # The drawing's bounds: every box (with its count badge), curve and label.
    xs: list[float] = []
    ys: list[float] = []
    for box in placed.values():
        xs += [box.x - box.hw, box.x + box.hw + 10]
        ys += [box.y - box.hh - 10, box.y + box.hh]
    out = ["<defs>"]
    for name in ("plain", "faint", "out", "in"):
        out.append(
            f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="10" '
            f'markerHeight="10" markerUnits="userSpaceOnUse" orient="auto">'
            f'<path d="M0,0.5 L10,5 L0,9.5 z"/></marker>'
        )
    out.append("</defs>")
    labels: list[str] = []
    out.append('<g class="edges">')
    for e in edges:
        if e.source not in placed or e.target not in placed:
            continue
        shape = _edge_shape(e, placed, nodes, pairs)
        xs += [x for x, _ in shape.points]
        ys += [y for _, y in shape.points]
        cls = ["edge", "router" if e.router else "static"]
        if not e.used:
            cls.append("unused")
        out.append(
            f'<g class="{" ".join(cls)}" data-src="{_esc(e.source)}" data-dst="{_esc(e.target)}">'
            f"<title>{_esc(e.title())}</title>"
            f'<path class="hit" d="{shape.d}"/><path class="line" d="{shape.d}"/></g>'
        )
        text = e.label or ""
        if e.router and e.taken:
            text = f"{text} {e.taken}×".strip()
        if text:
            text = _clip(text)
            w = len(text) * 10.5 * 0.6 + 8
            x, y = shape.label_at
            xs += [x - w / 2, x + w / 2]
            ys += [y - 8, y + 8]
            labels.append(
                f'<g class="elabel" data-src="{_esc(e.source)}" data-dst="{_esc(e.target)}" '
                f'transform="translate({x:.1f},{y:.1f})">'
                f'<rect x="{-w / 2:.1f}" y="-8" width="{w:.1f}" height="16" rx="3"/>'
                f'<text y="4">{_esc(text)}</text></g>'
            )
    out.append("</g>")
    out.append('<g class="nodes">')
    for nid, n in nodes.items():
        p = placed.get(nid)
        if p is None:
            continue
        cls = ["node", f"kind-{n.kind}"] + (["final"] if n.final else [])
        lines = [_clip(x) for x in n.lines()]
        y0 = -(len(lines) - 1) * _LINE_H / 2 + 4.5
        tspans = "".join(
            f'<tspan x="0" y="{y0 + i * _LINE_H:.1f}" class="{"nid" if i == 0 else "sub"}">{_esc(t)}</tspan>'
            for i, t in enumerate(lines)
        )
        badge_x, badge_y = (p.hw - 4, -p.hh + 2) if n.kind != "end" else (p.hw * 0.7, -p.hh * 0.7)
        out.append(
            f'<g class="{" ".join(cls)}" data-node="{_esc(nid)}" transform="translate({p.x:.1f},{p.y:.1f})">'
            f"<title>{_esc(_node_title(n))}</title>{_shape(n, p, _fill(n, roles))}"
            f'<text class="label">{tspans}</text>'
            f'<g class="count" transform="translate({badge_x:.1f},{badge_y:.1f})"><circle r="9"/>'
            f'<text y="3.5"></text></g></g>'
        )
    out.append("</g>")
    out.append('<g class="labels">' + "".join(labels) + "</g>")
    out.append("</svg>")
    pad = 10.0
    x0, y0 = (min(xs) - pad, min(ys) - pad) if xs else (0.0, 0.0)
    w, h = (max(xs) - x0 + pad, max(ys) - y0 + pad) if xs else (100.0, 60.0)
    head = (
        f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" viewBox="{x0:.0f} {y0:.0f} {w:.0f} {h:.0f}" '
        f'width="{w:.0f}" height="{h:.0f}" role="img" aria-label="the graph">'
    )
    return head + "".join(out)


def _legend(nodes: dict[str, _Node], edges: list[_Edge], roles: dict[str, str]) -> str:
    items = []
    for role, fill in roles.items():
        items.append(f'<span class="key"><i style="background:{fill}"></i>{_esc(role or "agent")}</span>')
    for kind in ("function", "tool", "interrupt", "graph"):
        if any(n.kind == kind for n in nodes.values()):
            name = "subgraph" if kind == "graph" else kind
            items.append(
                f'<span class="key"><i class="k-{kind}" style="background:{_KIND_FILLS[kind]}"></i>{name}</span>'
            )
    items.append('<span class="key"><b class="ln"></b>edge</span>')
    if any(e.router for e in edges):
        items.append('<span class="key"><b class="ln dash"></b>router edge</span>')
    items.append('<span class="key"><b class="ln out"></b>this message</span>')
    items.append('<span class="key"><b class="ln in"></b>its inputs</span>')
    return "".join(items)


# ---------------------------------------------------------------------------
# Runs: batches and a timeline
# ---------------------------------------------------------------------------


@dataclass
class _Batch:
    step: int
    llm: str | None
    latency: float
    size: int
    members: list[int] = field(default_factory=list)


def _batches(trace: Trace) -> tuple[list[_Batch], dict[int, int]]:
    """The model calls of a trace: agent turns of one step, model, latency and ``batch_size`` shared one
    ``generate`` call. Returns the calls and event index -> call index."""
    calls: list[_Batch] = []
    open_calls: dict[tuple[int, str | None, float, int], int] = {}
    of: dict[int, int] = {}
    for i, ev in enumerate(trace):
        if ev.kind != "agent":
            continue
        key = (ev.step, ev.llm, ev.latency_s, ev.batch_size)
        b = open_calls.get(key)
        if b is None or len(calls[b].members) >= max(1, ev.batch_size):
            b = open_calls[key] = len(calls)
            calls.append(_Batch(ev.step, ev.llm, ev.latency_s, ev.batch_size))
        calls[b].members.append(i)
        of[i] = b
    return calls, of


def _times(
    trace: Trace, calls: list[_Batch], of: dict[int, int]
) -> tuple[bool, list[tuple[float, float]], list[dict[str, Any]]]:
    """When each event ran, reconstructed from the latencies in the Runtime's order within a step.

    Returns whether the trace has timings, ``(start, end)`` per event and the steps' spans. Without
    timings (every latency 0) each call, node and decision takes one unit, so the timeline is in steps.
    """
    timed = any(ev.latency_s > 0 for ev in trace)
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * len(trace)
    steps: list[dict[str, Any]] = []
    by_step: dict[int, list[int]] = {}
    for i, ev in enumerate(trace):
        by_step.setdefault(ev.step, []).append(i)
    t = 0.0

    def took(ev: TraceEvent) -> float:
        return max(ev.latency_s, 0.0) if timed else 1.0

    # Every superstep from the first to the last: one with no event here ran a subgraph's own step, say.
    for step in range(min(by_step), max(by_step) + 1) if by_step else ():
        idx = by_step.get(step, [])
        start = t
        call_end: dict[int, float] = {}
        for i in idx:  # the step's model calls, one after another
            b = of.get(i)
            if b is not None and b not in call_end:
                dur = max(calls[b].latency, 0.0) if timed else 1.0
                for m in calls[b].members:
                    spans[m] = (t, t + dur)
                t += dur
                call_end[b] = t
        last_turn: dict[str, float] = {}
        for i in idx:  # tool calls run as their agent's turn comes back
            ev = trace[i]
            if i in of:
                last_turn[ev.sender] = spans[i][1]
            elif ev.kind == "tool_call":
                at = last_turn.get(ev.sender, t)
                spans[i] = (at, at + (0.0 if timed else 0.5))
        for i in idx:  # then Python, interrupt and subgraph nodes
            ev = trace[i]
            if i not in of and ev.kind not in ("tool_call", "router"):
                spans[i] = (t, t + took(ev))
                t += took(ev)
        for i in idx:  # then the routers
            ev = trace[i]
            if ev.kind == "router":
                spans[i] = (t, t + took(ev))
                t += took(ev)
        t = max([t, *(spans[i][1] for i in idx)])
        steps.append({"step": step, "t0": start, "t1": t})
    return timed, spans, steps


def _jsonable(x: Any) -> Any:
    """``x`` with everything JSON cannot hold made text (infinite floats included: JSON.parse rejects them)."""
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set | frozenset):
        return [_jsonable(v) for v in x]
    return str(x)


def _run_data(trace: Trace, k: int) -> dict[str, Any]:
    calls, of = _batches(trace)
    timed, spans, steps = _times(trace, calls, of)
    events = []
    for i, ev in enumerate(trace):
        d = ev.to_dict()
        d["i"] = i
        d["t0"], d["t1"] = spans[i]
        d["message"] = _is_message(ev)
        d["call"] = of.get(i)
        events.append(d)
    totals = trace.totals().to_dict()
    task = trace.meta.get("task")
    label = f"task {k + 1}" + (f": {task}" if isinstance(task, str) and task else "")
    return {
        "label": label,
        "meta": trace.meta,
        "totals": totals,
        "timed": timed,
        "steps": steps,
        "calls": [
            {
                "step": b.step,
                "llm": b.llm,
                "latency": b.latency,
                "size": b.size,
                "members": b.members,
                "shared": [],
            }
            for b in calls
        ],
        "events": events,
    }


def _link_shared_calls(runs: list[dict[str, Any]]) -> None:
    """Point each model call at the calls of the other runs it was one ``generate`` call with
    (``run_many`` advances its tasks in lockstep: same step, model, latency and batch size)."""
    index: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for r, run in enumerate(runs):
        for c, call in enumerate(run["calls"]):
            if call["size"] > len(call["members"]):
                index.setdefault((call["step"], call["llm"], call["latency"], call["size"]), []).append(
                    (r, c)
                )
    for group in index.values():
        if len(group) < 2:
            continue
        for r, c in group:
            runs[r]["calls"][c]["shared"] = [
                {"run": r2, "events": runs[r2]["calls"][c2]["members"]} for r2, c2 in group if r2 != r
            ]


# ---------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------


def _as_traces(source: TraceSource) -> list[Trace]:
    if isinstance(source, Trace):
        return [source]
    if isinstance(source, str | os.PathLike):
        return [Trace.load_jsonl(Path(source))]
    traces = list(source)
    if not traces or not all(isinstance(t, Trace) for t in traces):
        raise TypeError("trace must be a Trace, a non-empty sequence of Traces, or the path of a JSONL trace")
    return traces


def _script_json(data: Any) -> str:
    """JSON safe inside ``<script>``: no ``<``, ``>`` or ``&`` that the HTML parser could read."""
    text = json.dumps(_jsonable(data), ensure_ascii=False, separators=(",", ":"))
    return escape_script_json(text)


def trace_to_html(source: TraceSource, graph: Graph | None = None, *, title: str | None = None) -> str:
    """The text of a self-contained page that steps through a run (see the module docstring).

    ``source`` is a :class:`Trace`, several (the results of one ``run_many``,
    shown one at a time with a selector), or the path of a JSONL trace
    (:meth:`Trace.save_jsonl`). With ``graph`` the drawing holds every node
    and edge of the spec, a node's details its spec; without it, the nodes and
    edges the trace names. ``title`` defaults to the graph's (or the trace's)
    name.
    """
    traces = _as_traces(source)
    nodes, edges = _model(traces, graph)
    roles = _role_fills(nodes)
    name = graph.spec.name if graph is not None else str(traces[0].meta.get("graph") or "trace")
    runs = [_run_data(t, k) for k, t in enumerate(traces)]
    _link_shared_calls(runs)
    data = {
        "name": name,
        "nodes": {
            nid: {
                "kind": n.kind,
                "role": n.role,
                "llm": n.llm,
                "tools": n.tools,
                "router": n.router,
                "prompt": n.prompt,
                "function": n.function,
                "final": n.final,
                "in_graph": n.in_graph,
                "fill": _fill(n, roles),
            }
            for nid, n in nodes.items()
        },
        "edges": [
            {"source": e.source, "target": e.target, "router": e.router, "label": e.label} for e in edges
        ],
        "runs": runs,
    }
    page_title = title if title is not None else f"{name} — trace"
    parts = {
        "TITLE": _esc(page_title),
        "STYLE": _STYLE,
        "GRAPH": _graph_svg(nodes, edges, roles),
        "LEGEND": _legend(nodes, edges, roles),
        "SCRIPT": _SCRIPT,
        "DATA": _script_json(data),
    }
    # One pass, so that no inserted text (a role, a label) is searched for placeholders again.
    return re.sub(r"%(TITLE|STYLE|GRAPH|LEGEND|SCRIPT|DATA)%", lambda m: parts[m.group(1)], _PAGE)


def write_trace_html(
    source: TraceSource, path: str | Path, graph: Graph | None = None, *, title: str | None = None
) -> Path:
    """Write the page of :func:`trace_to_html` to ``path`` (parents created); returns the path.

    ``source`` may be the path of a saved JSONL trace, so that a page can be
    made after the run: ``write_trace_html("t.jsonl", "t.html", graph)``.
    """
    text = trace_to_html(source, graph, title=title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    log.debug("wrote the trace page %s (%d bytes)", path, len(text))
    return path


# ---------------------------------------------------------------------------
# HTML, CSS and JavaScript (all inline: the page must open from file:// with no network)
# ---------------------------------------------------------------------------

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%STYLE%</style>
</head>
<body>
<header>
  <h1 id="name"></h1>
  <span id="task"></span>
  <label id="run-pick" hidden>run <select id="run"></select></label>
  <div id="summary"></div>
  <div class="keys"><kbd>&larr;</kbd><kbd>&rarr;</kbd> step through &middot; click an event or a node</div>
</header>
<main>
  <section id="list-pane" class="pane">
    <h2>Steps <span id="count" class="muted"></span></h2>
    <ol id="events"></ol>
  </section>
  <section id="graph-pane" class="pane">
    <h2>Graph</h2>
    <div id="graph-box">%GRAPH%</div>
    <div id="legend">%LEGEND%</div>
  </section>
  <section id="timeline-pane" class="pane">
    <h2>Timeline <span id="axis-note" class="muted"></span></h2>
    <div id="timeline"></div>
  </section>
  <section id="details-pane" class="pane">
    <div id="details-head"><h2 id="details-title">Details</h2>
      <span class="nav"><button id="prev" type="button">&lsaquo; prev</button>
      <button id="next" type="button">next &rsaquo;</button></span></div>
    <div id="details"></div>
  </section>
</main>
<script type="application/json" id="trace-data">%DATA%</script>
<script>%SCRIPT%</script>
</body>
</html>
"""

_STYLE = """
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; }
body { font: 13px/1.4 system-ui, "Segoe UI", "DejaVu Sans", sans-serif; color: #1d2433; background: #eef1f5;
  display: flex; flex-direction: column; }
header { display: flex; align-items: center; gap: 8px 16px; padding: 8px 14px; background: #1f2a3c; color: #f2f4f8;
  flex: none; flex-wrap: wrap; }
header h1 { font-size: 16px; margin: 0; }
#task { color: #b9c3d4; max-width: 380px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
#summary { display: flex; gap: 4px 14px; flex-wrap: wrap; color: #b9c3d4; }
#summary b { color: #fff; font-weight: 600; }
#summary .warn b { color: #ffc078; }
.keys { margin-left: auto; color: #b9c3d4; font-size: 12px; }
kbd { display: inline-block; border: 1px solid #6b7890; border-radius: 3px; padding: 0 4px; margin-right: 2px;
  font: 11px/1.4 "DejaVu Sans", sans-serif; color: #f2f4f8; }
#run-pick { color: #b9c3d4; }
#run-pick select { max-width: 260px; }
main { flex: 1; min-height: 0; display: grid; gap: 8px; padding: 8px;
  grid-template-columns: 330px minmax(0, 1fr) 450px; grid-template-rows: minmax(0, 1.25fr) minmax(0, 1fr); }
.pane { background: #fff; border: 1px solid #d6dce6; border-radius: 6px; min-height: 0; min-width: 0;
  display: flex; flex-direction: column; overflow: hidden; }
.pane > h2, #details-head h2 { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: #5a6476;
  margin: 0; padding: 7px 10px; flex: none; }
.pane > h2 { border-bottom: 1px solid #eceff4; }
#details-head { display: flex; align-items: center; border-bottom: 1px solid #eceff4; flex: none; }
#details-head h2 { flex: 1; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; text-transform: none;
  font-size: 13px; color: #1d2433; letter-spacing: 0; }
.nav { padding-right: 8px; white-space: nowrap; }
.nav button { font: 12px system-ui, sans-serif; border: 1px solid #c5ccd8; background: #f7f8fa; border-radius: 4px;
  padding: 2px 8px; cursor: pointer; }
.nav button:hover { background: #eef2f8; }
.muted { color: #8a93a3; font-weight: 400; text-transform: none; letter-spacing: 0; }
#list-pane { grid-column: 1; grid-row: 1 / 3; }
#graph-pane { grid-column: 2; grid-row: 1; }
#timeline-pane { grid-column: 2; grid-row: 2; }
#details-pane { grid-column: 3; grid-row: 1 / 3; }

/* the list of events */
#events { list-style: none; margin: 0; padding: 0; overflow: auto; flex: 1; }
#events li { padding: 5px 10px 6px 7px; border-bottom: 1px solid #f0f2f5; cursor: pointer;
  border-left: 3px solid transparent; }
#events li:hover { background: #f5f8fc; }
#events li.ofnode { background: #f6f3e6; }
#events li.mate { background: #f3f0ff; }
#events li.sel { background: #fff1e3; border-left-color: #e8590c; }
.ev-top { display: flex; gap: 6px; align-items: baseline; white-space: nowrap; overflow: hidden; }
.idx { color: #8a93a3; font-variant-numeric: tabular-nums; min-width: 2.1em; text-align: right; }
.who { font-weight: 600; }
.to { color: #5a6476; overflow: hidden; text-overflow: ellipsis; }
.ev-sub, .ev-text { margin-left: calc(2.1em + 6px); white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
  font-size: 11.5px; }
.ev-sub { color: #6b7585; display: flex; flex-wrap: wrap; gap: 0 8px; align-items: baseline; white-space: normal; }
.ev-text { color: #4a5466; }
.tag { font-size: 10.5px; padding: 0 6px; border-radius: 8px; background: #e9edf3; color: #3b4558;
  white-space: nowrap; }
.tag.k-agent { background: #dbe7f7; color: #1f4b8f; }
.tag.k-router { background: #efe3fb; color: #6a2d9f; }
.tag.k-tool_call, .tag.k-turn { background: #ffe8cc; color: #8a4b00; }
.tag.k-function, .tag.k-tool { background: #e3f1e0; color: #2c6b22; }
.tag.k-interrupt { background: #fbdbe6; color: #96204d; }
.tag.k-graph { background: #ece6f6; color: #4b3a78; }
.tag.batch { background: #7048e8; color: #fff; }
.tag.err { background: #e03131; color: #fff; }

/* the graph */
#graph-box { flex: 1; overflow: auto; min-height: 0; display: flex; padding: 6px; }
#graph { margin: auto; display: block; flex: none; }
.node { cursor: pointer; }
.node .shape { stroke: #3b4558; stroke-width: 1.2; }
.node .inner { stroke: #3b4558; stroke-width: 1; }
.node.final .shape { stroke-width: 2.8; }
.node:hover .shape { stroke-width: 2.2; }
.node text.label { text-anchor: middle; fill: #1d2433; font-size: 11.5px; }
.node .nid { font-weight: 700; font-size: 13px; }
.node .sub { fill: #4a5466; }
.node.input .shape { stroke: #1c7ed6; stroke-width: 2.4; }
.node.recv .shape { stroke: #e8590c; stroke-width: 2.4; stroke-dasharray: 6 3; }
.node.sel .shape { stroke: #e8590c; stroke-width: 4; stroke-dasharray: none; }
.node.picked .shape { stroke: #111; stroke-width: 4; stroke-dasharray: none; }
.node .count circle { fill: #3b4558; stroke: #fff; stroke-width: 1.5; }
.node .count text { fill: #fff; font-size: 10px; font-weight: 700; text-anchor: middle; }
.node .count.zero { display: none; }
.edge { cursor: default; }
.edge .line { fill: none; stroke: #5c6677; stroke-width: 1.4; marker-end: url(#arrow-plain); }
.edge .hit { fill: none; stroke: transparent; stroke-width: 10; }
.edge.router .line { stroke-dasharray: 6 4; }
.edge.unused .line { stroke: #c0c7d1; marker-end: url(#arrow-faint); }
.edge.in .line { stroke: #1c7ed6; stroke-width: 2.4; marker-end: url(#arrow-in); }
.edge.out .line { stroke: #e8590c; stroke-width: 2.8; marker-end: url(#arrow-out); }
#arrow-plain path { fill: #5c6677; }
#arrow-faint path { fill: #c0c7d1; }
#arrow-out path { fill: #e8590c; }
#arrow-in path { fill: #1c7ed6; }
.elabel rect { fill: #fff; opacity: .92; }
.elabel text { font-size: 10.5px; fill: #3b4f7a; text-anchor: middle; }
.elabel.out text { fill: #c4470a; font-weight: 700; }
#legend { display: flex; flex-wrap: wrap; gap: 3px 14px; padding: 5px 10px; border-top: 1px solid #eceff4;
  font-size: 11.5px; color: #4a5466; flex: none; }
.key i { display: inline-block; width: 12px; height: 12px; border: 1px solid #3b4558; border-radius: 3px;
  vertical-align: -2px; margin-right: 4px; }
.key b.ln { display: inline-block; width: 22px; border-top: 2px solid #5c6677; vertical-align: 3px; margin-right: 4px; }
.key b.ln.dash { border-top-style: dashed; }
.key b.ln.out { border-top-color: #e8590c; border-top-width: 3px; }
.key b.ln.in { border-top-color: #1c7ed6; border-top-width: 3px; }

/* the timeline */
#timeline { flex: 1; overflow: auto; min-height: 0; }
.tl { position: relative; }
.tl-row { display: flex; position: relative; }
.tl-label { position: sticky; left: 0; z-index: 4; flex: none; background: #fff; border-right: 1px solid #e3e7ee;
  padding: 0 8px; font-weight: 600; font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap;
  cursor: pointer; display: flex; align-items: center; gap: 6px; }
.tl-label i { flex: none; width: 10px; height: 10px; border-radius: 2px; border: 1px solid #3b4558; }
.tl-label.picked { background: #f6f3e6; }
.tl-track { position: relative; flex: none; }
.tl-head { position: sticky; top: 0; z-index: 5; background: #fff; border-bottom: 1px solid #d6dce6; }
.tl-head .tl-label { z-index: 6; color: #8a93a3; font-weight: 400; font-size: 11px; }
.tl-lane { border-bottom: 1px solid #f0f2f5; }
.tl-step { position: absolute; top: 0; bottom: 0; border-left: 1px solid #e3e7ee; padding: 2px 5px;
  font-size: 11px; line-height: 14px; color: #6b7585; overflow: hidden; white-space: nowrap; }
.tl-step b { color: #1d2433; font-weight: 600; }
.tl-grid { position: absolute; top: 0; bottom: 0; border-left: 1px solid #f0f2f5; pointer-events: none; }
.bar { position: absolute; height: 20px; border-radius: 4px; border: 1px solid rgba(29,36,51,.45); z-index: 2;
  font-size: 11px; line-height: 18px; padding: 0 4px; overflow: hidden; white-space: nowrap; text-overflow: ellipsis;
  cursor: pointer; color: #1d2433; }
.bar:hover { border-color: #1d2433; }
.bar.k-router { background: #efe3fb !important; border-style: dashed; color: #5a2590; }
.bar.k-tool_call { background: #ffe8cc !important; color: #7a4300; }
.bar.partial { background-image: repeating-linear-gradient(135deg, rgba(255,255,255,.55) 0 4px, transparent 4px 8px); }
.bar.error { border: 2px solid #e03131; }
.bar.mate { box-shadow: 0 0 0 2px #7048e8; }
.bar.sel { box-shadow: 0 0 0 3px #e8590c; z-index: 3; }
.band { position: absolute; background: rgba(112,72,232,.07); border: 1px dashed rgba(112,72,232,.6); border-radius: 6px;
  z-index: 1; pointer-events: none; }
.band-label { position: absolute; z-index: 3; transform: translateX(-100%); background: #fff; color: #5f3dc4;
  border: 1px solid rgba(112,72,232,.7); border-radius: 7px; padding: 0 5px; font-size: 9.5px; line-height: 12px;
  font-weight: 700; white-space: nowrap; cursor: default; }

/* the details */
#details { overflow: auto; flex: 1; padding: 10px 12px 16px; }
#details h3 { font-size: 11.5px; text-transform: uppercase; letter-spacing: .04em; color: #5a6476; margin: 14px 0 6px; }
.route { display: flex; flex-wrap: wrap; gap: 4px; align-items: center; margin-bottom: 8px; }
.chip { border: 1px solid #c5ccd8; border-radius: 10px; padding: 0 8px; background: #f7f8fa; cursor: pointer;
  font-size: 12px; }
.chip:hover { border-color: #5c6677; }
.chip.chosen, .chip.from { background: #e8590c; color: #fff; border-color: #e8590c; }
.chip.off { color: #8a93a3; }
table.kv { border-collapse: collapse; width: 100%; }
.kv th { text-align: left; color: #6b7585; font-weight: 500; width: 118px; padding: 2px 8px 2px 0; vertical-align: top; }
.kv td { padding: 2px 0; word-break: break-word; }
.turn { border: 1px solid #e3e7ee; border-radius: 5px; margin-bottom: 6px; overflow: hidden; }
.turn .r { font-size: 10.5px; font-weight: 700; padding: 2px 8px; background: #f1f3f7; color: #4a5466;
  text-transform: uppercase; letter-spacing: .04em; }
.turn.system .r { background: #eaf2e3; }
.turn.user .r { background: #e4eefb; }
.turn.assistant .r { background: #fcecdc; }
.turn.tool .r { background: #fff1cf; }
pre { margin: 0; padding: 6px 8px; white-space: pre-wrap; word-break: break-word;
  font: 12px/1.45 ui-monospace, "DejaVu Sans Mono", monospace; }
.output pre { background: #fffaf2; border: 1px solid #f1dfc4; border-radius: 5px; }
.errbox pre { background: #fff0f0; border: 1px solid #f3b7b7; color: #a61e1e; border-radius: 5px; }
.plain pre { background: #f7f8fa; border: 1px solid #e3e7ee; border-radius: 5px; }
details.raw { margin-top: 14px; }
details.raw summary, details.sub summary { cursor: pointer; color: #5a6476; font-size: 12px; }
.link { color: #1c64c8; cursor: pointer; text-decoration: underline dotted; }
.evrow { display: flex; gap: 6px; padding: 3px 0; border-bottom: 1px solid #f0f2f5; cursor: pointer;
  white-space: nowrap; overflow: hidden; }
.evrow:hover { background: #f5f8fc; }
.evrow .ex { color: #6b7585; overflow: hidden; text-overflow: ellipsis; }
.empty { color: #8a93a3; padding: 16px; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("trace-data").textContent);
  const $ = (id) => document.getElementById(id);
  const svg = $("graph");
  const state = { run: 0, sel: -1, node: null };
  const nodeEls = {};
  const edgeEls = {};
  svg.querySelectorAll(".node").forEach((g) => { nodeEls[g.getAttribute("data-node")] = g; });
  svg.querySelectorAll(".edge, .elabel").forEach((g) => {
    const key = g.getAttribute("data-src") + "\u0000" + g.getAttribute("data-dst");
    (edgeEls[key] = edgeEls[key] || []).push(g);
  });

  // -- small helpers ----------------------------------------------------------------
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent, ...kids) { kids.forEach((k) => { if (k) parent.appendChild(k); }); return parent; }
  function fmtS(s) {
    if (!s) return "0 s";
    if (s < 0.001) return (s * 1e6).toFixed(0) + " \u00b5s";
    if (s < 0.01) return (s * 1000).toFixed(2) + " ms";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 100) return s.toFixed(2) + " s";
    return s.toFixed(0) + " s";
  }
  function plural(n, w) { return n + " " + w + (n === 1 ? "" : "s"); }
  function run() { return DATA.runs[state.run]; }
  function targets(ev) { return ev.kind === "router" ? (ev.meta.choices || ev.receivers) : ev.receivers; }
  function kindLabel(ev) {
    if (ev.kind === "agent" && ev.meta.partial) return "tool turn";
    if (ev.kind === "tool_call") return "tool call";
    if (ev.kind === "interrupt" && ev.meta.waiting) return "waiting";
    return ev.kind;
  }
  function kindClass(ev) { return ev.kind === "agent" && ev.meta.partial ? "k-turn" : "k-" + ev.kind; }
  function oneLine(s) { return String(s === undefined || s === null ? "" : s).replace(/\s+/g, " ").trim(); }
  function toolText(ev) {
    return (ev.meta.tool || "?") + "(" + JSON.stringify(ev.meta.arguments || {}) + ")";
  }
  function excerpt(ev) {
    if (ev.kind === "router") return "\u2192 " + (targets(ev).join(", ") || "END");
    if (ev.kind === "tool_call") return toolText(ev) + " = " + oneLine(ev.output);
    if (ev.kind === "agent" && ev.meta.partial) {
      const calls = (ev.meta.tool_calls || []).map((c) => c.name);
      return "calls " + (calls.join(", ") || "(no valid call)");
    }
    return oneLine(ev.output);
  }
  function callOf(ev) { return ev.call === null || ev.call === undefined ? null : run().calls[ev.call]; }
  function batched(ev) { const c = callOf(ev); return c && c.size > 1 ? c : null; }
  function json(x) { try { return JSON.stringify(x, null, 2); } catch (e) { return String(x); } }

  // -- header ------------------------------------------------------------------------
  function renderHeader() {
    const r = run();
    $("name").textContent = DATA.name;
    const task = r.meta.task;
    $("task").textContent = task ? "\u201c" + oneLine(task) + "\u201d" : "";
    $("task").title = task || "";
    const box = $("summary");
    box.textContent = "";
    const stat = (value, what, cls) => {
      const s = el("span", cls || "stat");
      add(s, el("b", null, value), document.createTextNode(" " + what));
      box.appendChild(s);
    };
    const messages = r.events.filter((e) => e.message).length;
    stat(r.events.length, r.events.length === 1 ? "event" : "events");
    stat(messages, messages === 1 ? "message" : "messages");
    stat(r.totals.calls, "model calls in " + r.totals.llm_batches + " batched");
    stat(r.totals.tokens, "tokens");
    if (r.totals.wall_s) stat(fmtS(r.totals.wall_s), "wall");
    if (r.meta.stopped) stat(r.meta.stopped, "stopped", "stat warn");
    else if (r.meta.ended_by) stat("ended:", oneLine(r.meta.ended_by));
    $("count").textContent = "(" + r.events.length + ")";
  }

  // -- the list of events ------------------------------------------------------------
  function renderList() {
    const ol = $("events");
    ol.textContent = "";
    const r = run();
    if (!r.events.length) { ol.appendChild(el("li", "empty", "no events in this trace")); return; }
    r.events.forEach((ev) => {
      const li = el("li", "event");
      li.dataset.i = ev.i;
      const top = add(el("div", "ev-top"), el("span", "idx", "#" + (ev.i + 1)),
        el("span", "tag " + kindClass(ev), kindLabel(ev)), el("span", "who", ev.sender));
      if (ev.message && ev.receivers.length) top.appendChild(el("span", "to", "\u2192 " + ev.receivers.join(", ")));
      const sub = add(el("div", "ev-sub"), el("span", null, "step " + ev.step + (ev.round ? " \u00b7 round " + ev.round : "")));
      const tok = ev.prompt_tokens + ev.completion_tokens;
      if (tok) sub.appendChild(el("span", null, tok + " tok"));
      if (r.timed && ev.latency_s > 0) sub.appendChild(el("span", null, fmtS(ev.latency_s)));
      const b = batched(ev);
      if (b) sub.appendChild(el("span", "tag batch", "batch \u00d7" + b.size));
      if (ev.error || ev.meta.tool_error) sub.appendChild(el("span", "tag err", "error"));
      add(li, top, sub, el("div", "ev-text", excerpt(ev) || "(empty)"));
      li.addEventListener("click", () => select(ev.i));
      ol.appendChild(li);
    });
  }

  // -- the timeline ----------------------------------------------------------------
  let LABEL_W = 118;
  const MIN_STEP = 72, MIN_BAR = 22, BAR_H = 20, GAP_Y = 3, PAD_Y = 5, HEAD_H = 34;
  function barText(ev) {
    if (ev.kind === "router") return "\u2192 " + (targets(ev).join(", ") || "END");
    if (ev.kind === "tool_call") return ev.meta.tool || "tool";
    if (ev.kind === "agent" && ev.meta.partial) return "turn " + ((ev.meta.turn || 0) + 1);
    if (ev.kind === "agent") return (ev.prompt_tokens + ev.completion_tokens) + " tok";
    return { function: "fn", tool: "tool", interrupt: "ask", graph: "subgraph" }[ev.kind] || ev.kind;
  }
  function renderTimeline() {
    const box = $("timeline");
    box.textContent = "";
    const r = run();
    if (!r.events.length) { box.appendChild(el("div", "empty", "no events")); return; }
    $("axis-note").textContent = r.timed
      ? "lanes per node, columns per superstep; widths follow the recorded latencies"
      : "lanes per node, columns per superstep (the trace has no timings)";
    const lanes = [];
    const seen = {};
    Object.keys(DATA.nodes).concat(r.events.map((e) => e.sender)).forEach((n) => {
      if (!seen[n] && r.events.some((e) => e.sender === n)) { seen[n] = true; lanes.push(n); }
    });
    LABEL_W = Math.min(190, Math.max(90, 36 + 7.6 * Math.max(...lanes.map((n) => n.length))));
    const avail = Math.max(240, box.clientWidth - LABEL_W - 14);
    const steps = r.steps;
    const dur = steps.map((s) => s.t1 - s.t0);
    let scale = 0;
    const total = dur.reduce((a, b) => a + b, 0);
    if (total > 0) {
      scale = avail / total;
      for (let it = 0; it < 4; it++) {
        let fixed = 0, flex = 0;
        dur.forEach((d) => { if (d * scale < MIN_STEP) fixed += MIN_STEP; else flex += d; });
        if (flex > 0 && avail - fixed > 0) scale = (avail - fixed) / flex;
      }
    }
    const stepX = {}, stepW = {};
    let x = 0;
    steps.forEach((s, k) => { stepX[s.step] = x; stepW[s.step] = Math.max(MIN_STEP, dur[k] * scale); x += stepW[s.step]; });
    const trackW = x + 4;
    const stepOf = {};
    steps.forEach((s) => { stepOf[s.step] = s; });
    const at = (ev, t) => {
      const s = stepOf[ev.step], d = s.t1 - s.t0;
      return stepX[ev.step] + 4 + (d > 0 ? ((t - s.t0) / d) * (stepW[ev.step] - 8) : 0);
    };
    // bars, packed into rows within each lane so that none hides another
    const bars = {};
    lanes.forEach((n) => { bars[n] = []; });
    r.events.forEach((ev) => {
      const width = Math.max(MIN_BAR, at(ev, ev.t1) - at(ev, ev.t0) - 1);
      // a bar that starts at the end of its step stays inside the step's column
      const left = Math.max(stepX[ev.step] + 2, Math.min(at(ev, ev.t0), stepX[ev.step] + stepW[ev.step] - width - 3));
      bars[ev.sender].push({ ev, left, width, row: 0 });
    });
    const laneH = {};
    lanes.forEach((n) => {
      const ends = [];
      bars[n].sort((a, b) => a.left - b.left || a.ev.i - b.ev.i).forEach((b) => {
        let row = ends.findIndex((end) => end + 2 <= b.left);
        if (row < 0) { row = ends.length; ends.push(0); }
        ends[row] = b.left + b.width;
        b.row = row;
      });
      const rows = Math.max(1, ends.length);
      laneH[n] = PAD_Y * 2 + rows * BAR_H + (rows - 1) * GAP_Y;
    });
    const tl = el("div", "tl");
    tl.style.width = (LABEL_W + trackW) + "px";
    const head = el("div", "tl-row tl-head");
    head.style.height = HEAD_H + "px";
    const corner = el("div", "tl-label", r.timed ? "node \\ time" : "node \\ step");
    corner.style.width = LABEL_W + "px";
    const headTrack = el("div", "tl-track");
    headTrack.style.width = trackW + "px";
    steps.forEach((s, k) => {
      const c = el("div", "tl-step");
      c.style.left = stepX[s.step] + "px";
      c.style.width = stepW[s.step] + "px";
      add(c, el("b", null, "step " + s.step));
      if (r.timed && dur[k] > 0) { c.appendChild(el("br")); c.appendChild(document.createTextNode(fmtS(dur[k]))); }
      c.title = "superstep " + s.step + (r.timed ? ": " + fmtS(dur[k]) + " (from the recorded latencies)" : "");
      headTrack.appendChild(c);
    });
    add(head, corner, headTrack);
    tl.appendChild(head);
    const top = {};
    let y = HEAD_H;
    lanes.forEach((n) => {
      top[n] = y;
      const row = el("div", "tl-row tl-lane");
      row.style.height = laneH[n] + "px";
      const label = el("div", "tl-label");
      label.style.width = LABEL_W + "px";
      label.dataset.node = n;
      const sw = el("i");
      sw.style.background = (DATA.nodes[n] || {}).fill || "#ddd";
      add(label, sw, el("span", null, n));
      label.title = n;
      label.addEventListener("click", () => selectNode(n));
      const track = el("div", "tl-track");
      track.style.width = trackW + "px";
      steps.forEach((s) => {
        const g = el("div", "tl-grid");
        g.style.left = stepX[s.step] + "px";
        track.appendChild(g);
      });
      bars[n].forEach((b) => {
        const ev = b.ev;
        const d = el("div", "bar " + kindClass(ev) + " k-" + ev.kind, barText(ev));
        if (ev.meta.partial) d.classList.add("partial");
        if (ev.error || ev.meta.tool_error) d.classList.add("error");
        d.dataset.i = ev.i;
        d.style.left = b.left + "px";
        d.style.width = b.width + "px";
        d.style.top = PAD_Y + b.row * (BAR_H + GAP_Y) + "px";
        d.style.background = (DATA.nodes[ev.sender] || {}).fill || "#ddd";
        d.title = "#" + (ev.i + 1) + " " + ev.sender + " \u00b7 " + kindLabel(ev) + " \u00b7 step " + ev.step
          + (r.timed ? " \u00b7 " + fmtS(ev.latency_s) : "") + "\n" + excerpt(ev).slice(0, 200);
        d.addEventListener("click", () => select(ev.i));
        b.el = d;
        track.appendChild(d);
      });
      add(row, label, track);
      tl.appendChild(row);
      y += laneH[n];
    });
    // one band around the turns that shared a batched model call
    const byIndex = {};
    lanes.forEach((n) => bars[n].forEach((b) => { byIndex[b.ev.i] = b; }));
    r.calls.forEach((c) => {
      if (c.size < 2) return;
      let l = Infinity, rr = -Infinity, t = Infinity, bt = -Infinity;
      c.members.forEach((i) => {
        const b = byIndex[i];
        const y0 = top[b.ev.sender] + PAD_Y + b.row * (BAR_H + GAP_Y);
        l = Math.min(l, b.left); rr = Math.max(rr, b.left + b.width);
        t = Math.min(t, y0); bt = Math.max(bt, y0 + BAR_H);
      });
      const band = el("div", "band");
      band.style.left = (LABEL_W + l - 3) + "px";
      band.style.width = (rr - l + 6) + "px";
      band.style.top = (t - 3) + "px";
      band.style.height = (bt - t + 6) + "px";
      const others = c.size - c.members.length;
      const pill = el("div", "band-label", "batch \u00d7" + c.size);
      pill.title = "one batched model call of " + c.size + " prompts"
        + (others > 0 ? " (" + others + " of them from the other runs of run_many)" : "");
      pill.style.left = (LABEL_W + rr - 2) + "px";
      pill.style.top = (t - 9) + "px";
      add(tl, band, pill);
    });
    box.appendChild(tl);
  }

  // -- the graph ---------------------------------------------------------------------
  function fitGraph() {
    const box = $("graph-box");
    const w = +svg.getAttribute("width"), h = +svg.getAttribute("height");
    // shrink a big graph to fit, but not below a legible size (then the pane scrolls)
    const k = Math.max(0.62, Math.min(1.5, (box.clientWidth - 14) / w, (box.clientHeight - 14) / h));
    svg.style.width = w * k + "px";
    svg.style.height = h * k + "px";
  }
  function splitRows() {
    // share the centre column's height between the graph and the timeline by what each needs:
    // a timeline that fits gets its height, the graph the rest
    const main = document.querySelector("main");
    const tl = document.querySelector("#timeline .tl");
    const avail = main.clientHeight - 24;
    const legend = $("legend").offsetHeight;
    const gNeed = +svg.getAttribute("height") * Math.min(1, ($("graph-box").clientWidth - 14) / +svg.getAttribute("width"))
      + legend + 52;
    const tNeed = (tl ? tl.offsetHeight : 80) + 50;
    let t = avail * tNeed / (gNeed + tNeed);
    if (gNeed + tNeed <= avail) t = tNeed;
    t = Math.max(150, Math.min(t, avail - 220));
    main.style.gridTemplateRows = "minmax(0, 1fr) " + Math.round(t) + "px";
  }
  function renderCounts() {
    const counts = {};
    run().events.forEach((e) => { counts[e.sender] = (counts[e.sender] || 0) + 1; });
    Object.keys(nodeEls).forEach((n) => {
      const g = nodeEls[n].querySelector(".count");
      if (!g) return;
      const c = counts[n] || 0;
      g.querySelector("text").textContent = c > 99 ? "99+" : String(c);
      g.classList.toggle("zero", c === 0);
      const t = nodeEls[n].querySelector("title");
      if (t && !t.dataset.base) t.dataset.base = t.textContent;
      if (t) t.textContent = t.dataset.base + "\n" + plural(c, "event") + " in this run";
    });
  }
  function clearGraph() {
    Object.values(nodeEls).forEach((g) => g.classList.remove("sel", "recv", "input", "picked"));
    Object.values(edgeEls).forEach((gs) => gs.forEach((g) => g.classList.remove("out", "in")));
  }
  function mark(src, dst, cls) { (edgeEls[src + "\u0000" + dst] || []).forEach((g) => g.classList.add(cls)); }
  function highlightEvent(ev) {
    clearGraph();
    (ev.meta.inputs_from || []).forEach((s) => {
      if (nodeEls[s] && s !== ev.sender) nodeEls[s].classList.add("input");
      mark(s, ev.sender, "in");
    });
    if (ev.kind !== "tool_call") {
      targets(ev).forEach((t) => {
        if (nodeEls[t] && t !== ev.sender) nodeEls[t].classList.add("recv");
        mark(ev.sender, t, "out");
      });
    }
    if (nodeEls[ev.sender]) nodeEls[ev.sender].classList.add("sel");
  }

  // -- details -----------------------------------------------------------------------
  function chip(name, cls) {
    const c = el("span", "chip" + (cls ? " " + cls : ""), name);
    if (DATA.nodes[name]) c.addEventListener("click", () => selectNode(name));
    return c;
  }
  function kv(rows) {
    const t = el("table", "kv");
    rows.forEach(([k, v]) => {
      if (v === undefined || v === null || v === "") return;
      const tr = el("tr");
      const td = el("td");
      if (v instanceof Node) td.appendChild(v); else td.textContent = String(v);
      add(tr, el("th", null, k), td);
      t.appendChild(tr);
    });
    return t;
  }
  function block(cls, text) { return add(el("div", cls), el("pre", null, text)); }
  function evLink(i, runIndex, text) {
    const a = el("span", "link", text);
    a.addEventListener("click", (e) => {
      e.stopPropagation();
      if (runIndex !== undefined && runIndex !== state.run) switchRun(runIndex);
      select(i);
    });
    return a;
  }
  function chatTurns(prompt) {
    const box = el("div");
    prompt.forEach((m) => {
      const role = String(m.role || "?");
      const turn = el("div", "turn " + role.replace(/[^a-z_]/gi, ""));
      turn.appendChild(el("div", "r", role + (m.name ? " \u00b7 " + m.name : "")));
      let text = m.content === undefined || m.content === null ? "" : m.content;
      if (typeof text !== "string") text = json(text);
      if (m.tool_calls) text += (text ? "\n" : "") + "tool calls: " + json(m.tool_calls);
      turn.appendChild(el("pre", null, text));
      box.appendChild(turn);
    });
    return box;
  }
  function batchInfo(ev) {
    const c = batched(ev);
    if (!c) return null;
    const span = el("span");
    span.appendChild(document.createTextNode("one call of " + c.size + " prompts: "));
    c.members.forEach((i, k) => {
      if (k) span.appendChild(document.createTextNode(", "));
      const other = run().events[i];
      const name = "#" + (i + 1) + " " + other.sender;
      span.appendChild(i === ev.i ? el("b", null, name) : evLink(i, undefined, name));
    });
    (c.shared || []).forEach((s) => {
      s.events.forEach((i) => {
        span.appendChild(document.createTextNode(", "));
        span.appendChild(evLink(i, s.run, DATA.runs[s.run].label.split(":")[0] + " #" + (i + 1)));
      });
    });
    const rest = c.size - c.members.length - (c.shared || []).reduce((a, s) => a + s.events.length, 0);
    if (rest > 0) span.appendChild(document.createTextNode(" and " + rest + " from other runs"));
    return span;
  }
  function routerSection(ev, d) {
    d.appendChild(el("h3", null, "Router decision"));
    const chosen = targets(ev);
    const allowed = ev.meta.allowed || chosen;
    const row = el("div", "route");
    allowed.forEach((t) => row.appendChild(chip(t, chosen.includes(t) ? "chosen" : "off")));
    chosen.filter((t) => !allowed.includes(t)).forEach((t) => row.appendChild(chip(t, "chosen")));
    d.appendChild(row);
    d.appendChild(kv([
      ["router", ev.meta.router],
      ["chose", chosen.join(", ") || "END"],
      ["fallback", ev.meta.fallback ? "yes: the model named no target" : null],
      ["retried", ev.meta.retried ? "yes; first answer: " + oneLine(ev.meta.first_answer) : null],
    ]));
    if (ev.meta.answer !== undefined) {
      d.appendChild(el("h3", null, "Model's answer"));
      d.appendChild(block("output", ev.meta.answer));
    }
    const p = ev.meta.probabilities;
    if (p !== undefined) {
      d.appendChild(el("h3", null, "Probabilities"));
      if (p && typeof p === "object" && !Array.isArray(p)) {
        const rows = Object.keys(p).sort((a, b) => p[b] - p[a]);
        d.appendChild(kv(rows.map((k) => [k, typeof p[k] === "number" ? p[k].toFixed(3) : json(p[k])])));
      } else d.appendChild(block("plain", json(p)));
    }
  }
  function toolSection(ev, d) {
    d.appendChild(el("h3", null, "Tool call"));
    const r = run();
    const asked = r.events.filter((e) => e.i < ev.i && e.sender === ev.sender && e.kind === "agent" && e.meta.partial).pop();
    const next = r.events.find((e) => e.i > ev.i && e.sender === ev.sender && e.kind === "agent");
    const links = el("span");
    if (asked) add(links, document.createTextNode("asked for by "), evLink(asked.i, undefined, "#" + (asked.i + 1)));
    if (next) {
      add(links, document.createTextNode((asked ? ", " : "") + "read by "), evLink(next.i, undefined, "#" + (next.i + 1)));
    }
    d.appendChild(kv([
      ["tool", ev.meta.tool],
      ["call id", ev.meta.call_id],
      ["turns", asked || next ? links : null],
      ["failed", ev.meta.tool_error ? "yes" : null],
      ["approval", ev.meta.approval === null || ev.meta.approval === undefined ? null : json(ev.meta.approval)],
    ]));
    d.appendChild(el("h3", null, "Arguments"));
    d.appendChild(block("plain", json(ev.meta.arguments || {})));
  }
  function turnSection(ev, d) {
    d.appendChild(el("h3", null, "Tool calls asked for (turn " + ((ev.meta.turn || 0) + 1) + ")"));
    const calls = ev.meta.tool_calls || [];
    if (!calls.length) d.appendChild(el("div", "muted", "no valid call"));
    calls.forEach((c) => d.appendChild(block("plain", c.name + "(" + json(c.arguments) + ")")));
    (ev.meta.tool_call_errors || []).forEach((e) => d.appendChild(block("errbox", e)));
    const r = run();
    const results = r.events.filter(
      (e) => e.kind === "tool_call" && e.sender === ev.sender && e.step === ev.step && e.round === ev.round
    );
    if (results.length) {
      const row = el("div", "route");
      row.appendChild(el("span", "muted", "results: "));
      results.forEach((e) => row.appendChild(evLink(e.i, undefined, "#" + (e.i + 1) + " " + (e.meta.tool || "tool"))));
      d.appendChild(row);
    }
  }
  function subtraceSection(ev, d) {
    const sub = ev.meta.subtrace;
    if (!sub || !sub.events) return;
    d.appendChild(el("h3", null, "Subgraph " + (ev.meta.subgraph || "") + ": " + plural(sub.events.length, "event")));
    sub.events.forEach((e, k) => {
      const det = el("details", "sub");
      const line = "#" + (k + 1) + " " + e.sender + " \u00b7 " + e.kind + " \u00b7 " + oneLine(e.output).slice(0, 80);
      const s = el("summary", null, line);
      det.appendChild(s);
      if (e.prompt && e.prompt.length) det.appendChild(chatTurns(e.prompt));
      det.appendChild(block("output", e.output));
      d.appendChild(det);
    });
  }
  function showEvent(ev) {
    const d = $("details");
    d.textContent = "";
    $("details-title").textContent = "#" + (ev.i + 1) + " \u00b7 " + ev.sender + " \u00b7 " + kindLabel(ev);
    const route = el("div", "route");
    route.appendChild(chip(ev.sender, "from"));
    const outs = ev.kind === "tool_call" ? [] : targets(ev);
    if (outs.length || ev.kind === "router") {
      route.appendChild(el("span", null, "\u2192"));
      if (!outs.length) route.appendChild(el("span", "muted", "END"));
      outs.forEach((t) => route.appendChild(chip(t)));
    }
    d.appendChild(route);
    const tok = ev.prompt_tokens + ev.completion_tokens;
    const from = ev.meta.inputs_from || [];
    const inputs = from.length ? add(el("span", "route"), ...from.map((s) => chip(s))) : null;
    const b = batched(ev);
    d.appendChild(kv([
      ["step", "step " + ev.step + ", round " + ev.round],
      ["role", ev.role],
      ["model", ev.llm],
      ["tokens", tok ? ev.prompt_tokens + " prompt + " + ev.completion_tokens + " completion = " + tok : null],
      // tool calls, subgraphs, interrupts and LLM routers record no latency of their own
      ["latency", run().timed && ev.latency_s > 0 ? fmtS(ev.latency_s) + (b ? " (the whole batched call)" : "") : null],
      ["batch", b ? batchInfo(ev) : (ev.kind === "agent" ? "a call of its own" : null)],
      ["finish", ev.finish_reason],
      ["inputs from", inputs],
      ["tool-loop turn", ev.kind === "agent" && ev.meta.turn ? String(ev.meta.turn + 1) : null],
      ["tool errors", ev.meta.tool_errors ? String(ev.meta.tool_errors) : null],
      ["note", ev.meta.tool_steps_exhausted ? "stopped at max_tool_steps" : null],
    ]));
    if (ev.error) { d.appendChild(el("h3", null, "Error")); d.appendChild(block("errbox", ev.error)); }
    if (ev.kind === "router") routerSection(ev, d);
    if (ev.kind === "tool_call") toolSection(ev, d);
    if (ev.kind === "agent" && ev.meta.partial) turnSection(ev, d);
    if (ev.kind === "interrupt") {
      d.appendChild(el("h3", null, ev.meta.waiting ? "Waiting for a person's answer" : "Question"));
      if (!ev.meta.waiting && ev.meta.question) d.appendChild(block("plain", ev.meta.question));
    }
    if (ev.prompt && ev.prompt.length) {
      d.appendChild(el("h3", null, "Prompt \u00b7 " + plural(ev.prompt.length, "turn")));
      d.appendChild(chatTurns(ev.prompt));
    }
    const titles = { router: "Raw decision", tool_call: "Result", interrupt: ev.meta.waiting ? "Payload" : "Answer" };
    const outTitle = titles[ev.kind] || "Output";
    d.appendChild(el("h3", null, outTitle));
    d.appendChild(block(ev.kind === "tool_call" && ev.meta.tool_error ? "errbox" : "output", ev.output));
    if (ev.kind === "graph") subtraceSection(ev, d);
    const raw = el("details", "raw");
    raw.appendChild(el("summary", null, "raw event"));
    const copy = Object.assign({}, ev);
    ["i", "t0", "t1", "message", "call"].forEach((k) => delete copy[k]);
    raw.appendChild(block("plain", json(copy)));
    d.appendChild(raw);
    d.scrollTop = 0;
  }
  function showNode(id) {
    const n = DATA.nodes[id] || { kind: "agent" };
    const d = $("details");
    d.textContent = "";
    $("details-title").textContent = "node " + id;
    const evs = run().events.filter((e) => e.sender === id);
    const tok = evs.reduce((a, e) => a + (e.kind === "tool_call" ? 0 : e.prompt_tokens + e.completion_tokens), 0);
    const time = evs.reduce((a, e) => a + e.latency_s, 0);
    d.appendChild(kv([
      ["kind", n.kind === "end" ? "the end of a router's branch" : n.kind],
      ["role", n.role],
      ["model", n.llm],
      ["function", n.function],
      ["tools", n.tools && n.tools.length ? n.tools.join(", ") : null],
      ["router", n.router],
      ["final node", n.final ? "yes" : null],
      ["in the spec", n.in_graph ? null : "no (seen in the trace only)"],
      ["events", plural(evs.length, "event") + " in this run, " + plural(evs.filter((e) => e.message).length, "message")],
      ["tokens", tok ? String(tok) : null],
      ["latency", run().timed && time ? fmtS(time) + " in all" : null],
    ]));
    const outs = DATA.edges.filter((e) => e.source === id);
    const ins = DATA.edges.filter((e) => e.target === id);
    if (ins.length) d.appendChild(kv([["from", add(el("span", "route"), ...ins.map((e) => chip(e.source)))]]));
    const toChips = outs.map((e) => chip(e.target, e.router ? "off" : ""));
    if (outs.length) d.appendChild(kv([["to", add(el("span", "route"), ...toChips)]]));
    if (n.prompt) { d.appendChild(el("h3", null, "Prompt in the spec")); d.appendChild(block("plain", n.prompt)); }
    d.appendChild(el("h3", null, "Its events"));
    if (!evs.length) d.appendChild(el("div", "muted", "none in this run"));
    evs.forEach((e) => {
      const row = add(el("div", "evrow"), el("span", "idx", "#" + (e.i + 1)), el("span", "tag " + kindClass(e), kindLabel(e)),
        el("span", null, "step " + e.step), el("span", "ex", excerpt(e)));
      row.addEventListener("click", () => select(e.i));
      d.appendChild(row);
    });
    d.scrollTop = 0;
  }

  // -- selection ---------------------------------------------------------------------
  function markList(i, mates, ofNode) {
    document.querySelectorAll("#events li.event").forEach((li) => {
      const k = +li.dataset.i;
      li.classList.toggle("sel", k === i);
      li.classList.toggle("mate", mates.includes(k) && k !== i);
      li.classList.toggle("ofnode", ofNode !== null && run().events[k].sender === ofNode);
    });
    document.querySelectorAll("#timeline .bar").forEach((b) => {
      const k = +b.dataset.i;
      b.classList.toggle("sel", k === i);
      b.classList.toggle("mate", mates.includes(k) && k !== i);
    });
    document.querySelectorAll("#timeline .tl-label").forEach((l) => {
      l.classList.toggle("picked", ofNode !== null && l.dataset.node === ofNode);
    });
  }
  function select(i) {
    const r = run();
    if (i < 0 || i >= r.events.length) return;
    state.sel = i;
    state.node = null;
    const ev = r.events[i];
    const b = batched(ev);
    markList(i, b ? b.members : [], null);
    const li = document.querySelector('#events li[data-i="' + i + '"]');
    if (li) li.scrollIntoView({ block: "nearest" });
    const bar = document.querySelector('#timeline .bar[data-i="' + i + '"]');
    if (bar) bar.scrollIntoView({ block: "nearest", inline: "nearest" });
    highlightEvent(ev);
    showEvent(ev);
  }
  function selectNode(id) {
    state.node = id;
    clearGraph();
    if (nodeEls[id]) nodeEls[id].classList.add("picked");
    markList(state.sel, [], id);
    showNode(id);
  }
  function step(delta) {
    const n = run().events.length;
    if (!n) return;
    select(Math.max(0, Math.min(n - 1, state.sel < 0 ? 0 : state.sel + delta)));
  }
  function renderRun() {
    renderHeader();
    renderList();
    renderTimeline();
    renderCounts();
    state.sel = -1;
    if (run().events.length) select(0);
    else {
      clearGraph();
      $("details").textContent = "";
      $("details").appendChild(el("div", "empty", "This trace has no events."));
    }
  }
  function switchRun(k) {
    state.run = k;
    $("run").value = String(k);
    renderRun();
    splitRows();
    fitGraph();
  }

  // -- wiring ------------------------------------------------------------------------
  if (DATA.runs.length > 1) {
    $("run-pick").hidden = false;
    DATA.runs.forEach((r, k) => {
      const o = el("option", null, r.label.length > 60 ? r.label.slice(0, 59) + "\u2026" : r.label);
      o.value = String(k);
      $("run").appendChild(o);
    });
    $("run").addEventListener("change", (e) => switchRun(+e.target.value));
  }
  Object.keys(nodeEls).forEach((n) => nodeEls[n].addEventListener("click", () => selectNode(n)));
  $("prev").addEventListener("click", () => step(-1));
  $("next").addEventListener("click", () => step(1));
  document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.target && e.target.closest && e.target.closest("select, input, textarea")) return;
    const n = run().events.length;
    if (["ArrowRight", "ArrowDown", "j", "n"].includes(e.key)) step(1);
    else if (["ArrowLeft", "ArrowUp", "k", "p"].includes(e.key)) step(-1);
    else if (e.key === "Home") select(0);
    else if (e.key === "End") select(n - 1);
    else if (e.key === "Escape" && state.sel >= 0) select(state.sel);
    else return;
    e.preventDefault();
  });
  let resizing = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      renderTimeline();
      splitRows();
      fitGraph();
      if (state.node !== null) markList(state.sel, [], state.node);
      else if (state.sel >= 0) {
        const b = batched(run().events[state.sel]);
        markList(state.sel, b ? b.members : [], null);
      }
    }, 120);
  });
  renderRun();
  splitRows();
  fitGraph();
  document.body.dataset.ready = "1";
})();
"""

"""Drawings of graphs and traces: Mermaid text and PNG images.

Mermaid (:func:`graph_to_mermaid`, :func:`trace_to_mermaid`) pastes into
Markdown, GitHub and notebooks; agent nodes are rectangles, function nodes
subroutine boxes, tool nodes hexagons, interrupt nodes flags (``>"..."]``),
graph nodes (subgraphs) rounded boxes, and the final node is drawn bold.
Trace drawings label each edge with the completion tokens it carried
(``a -->|123 tok| b``) and each node with its number of calls.

A router's edges (:meth:`Graph.conditional_edges`) are drawn dashed
(``a -.->|label| b``) with the router's label for that target; a target
the router gives no label is left unlabelled, and the source node names its
router instead (``router: pick()`` for a function, ``router: llm`` for a
model, ``router: policy`` for a router object). A router that may end the
branch points at a terminal ``END`` circle, drawn only when some router
targets ``END``. In a trace, a router edge that was taken is drawn solid with
how often it was chosen and the tokens it carried (``sup -->|2x, 40 tok| a``);
one never taken stays dashed and faint. Trace events that are no message
between nodes are not drawn as edges: an agent's tool calls are counted on
its node (``3 tool calls``), a router's decision is the edge it chose, and a
node still waiting for a person's answer says so (``waiting for input``).

PNG (:func:`render_graph_png`, :func:`render_trace_png`) uses matplotlib's
Agg canvas directly (no pyplot, no display, no global backend switch). Nodes
are placed by the topological layers of the flow (static and router edges)
from left to right, so the members of a cycle (a debate, a supervisor loop)
stand in one column or on a circle with curved edges between them. Arrows
end at the border of their boxes, and an edge that would run straight through
another node's box bends around it. For a trace, line width grows with the
tokens an edge carried.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import networkx as nx
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch
from matplotlib.transforms import Bbox

from .graph import Graph, topological_layers_of
from .routing import END
from .spec import RouterSpec
from .trace import Trace, TraceEvent

log = logging.getLogger(__name__)

__all__ = [
    "Direction",
    "graph_to_mermaid",
    "layout_positions",
    "trace_figure",
    "render_graph_png",
    "render_trace_png",
    "trace_to_mermaid",
]

Direction = Literal["TD", "TB", "BT", "LR", "RL"]
"""A Mermaid flowchart direction: top-down (``TD``, ``TB``), bottom-up, left-right, right-left."""
_DIRECTIONS: tuple[str, ...] = get_args(Direction)
# Words Mermaid's flowchart grammar treats specially; used as ids they break the chart.
_MERMAID_RESERVED = {
    "end", "graph", "flowchart", "subgraph", "style", "classdef", "class", "click",
    "linkstyle", "direction", "default", "call", "href",
}  # fmt: skip
_SHAPES = {
    "agent": ('["', '"]'),
    "function": ('[["', '"]]'),
    "tool": ('{{"', '"}}'),
    "interrupt": ('>"', '"]'),
    "graph": ('("', '")'),
    "end": ('(("', '"))'),
}
_FACE = {
    "agent": "#dbe9f6",
    "function": "#e5f5e0",
    "tool": "#fdebd0",
    "interrupt": "#f8d7e3",
    "graph": "#e8e0f3",
    "end": "#d9d9d9",
}
_BOX = {
    "agent": "round,pad=0.35",
    "function": "square,pad=0.35",
    "tool": "roundtooth,pad=0.35",
    "interrupt": "sawtooth,pad=0.35",
    "graph": "round4,pad=0.35",
    "end": "circle,pad=0.2",
}
# The END terminal's key among a drawing's nodes: never a node id (ids start with a letter or '_').
_END_KEY = "<END>"
# Trace events that are no message between nodes: a router's decision, one tool call of an agent.
_NOT_MESSAGES = ("router", "tool_call")
# Colours of an edge and of its label, and of a faint edge (a router's edge never taken) and its label.
_EDGE_COLOUR, _LABEL_COLOUR = "#444444", "#1f3b73"
_FAINT_EDGE_COLOUR, _FAINT_LABEL_COLOUR = "#b8b8b8", "#9a9a9a"
_FAINT_MERMAID = "stroke:#b8b8b8,color:#9a9a9a"


def _is_waiting(ev: TraceEvent) -> bool:
    """An interrupt that asks a person and waits (``meta["waiting"]``), not the answer that came back."""
    return ev.kind == "interrupt" and bool(ev.meta.get("waiting"))


def _is_message(ev: TraceEvent) -> bool:
    """A node's output (what its receivers read): not a router's decision, a tool call,
    an agent's intermediate tool-loop turn, or an interrupt still waiting."""
    return ev.kind not in _NOT_MESSAGES and not ev.meta.get("partial") and not _is_waiting(ev)


def _target_key(target: str) -> str:
    return _END_KEY if target == END else target


# ---------------------------------------------------------------------------
# Mermaid
# ---------------------------------------------------------------------------


def _mermaid_ids(names: Sequence[str]) -> dict[str, str]:
    """Unique Mermaid-safe ids: letters, digits and ``_``; never a keyword, never starting with a digit.

    The END terminal (``_END_KEY``) gets ``END_`` (``end`` is a keyword), or a numbered variant."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        base = "END" if name == _END_KEY else re.sub(r"[^A-Za-z0-9_]", "_", name) or "node"
        if base[0].isdigit():
            base = "n_" + base
        if base.lower() in _MERMAID_RESERVED:
            base += "_"
        candidate, k = base, 1
        while candidate in used:
            k += 1
            candidate = f"{base}_{k}"
        used.add(candidate)
        out[name] = candidate
    return out


def _mermaid_text(text: str) -> str:
    """Escape text for a quoted Mermaid label (entity codes for quotes, angle brackets and pipes)."""
    return (
        text.replace("#", "#35;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("|", "#124;")
        .replace("\n", " ")
    )


def _check_direction(direction: str) -> str:
    d = direction.upper()
    if d not in _DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(_DIRECTIONS)}, got {direction!r}")
    return d


def _node_line(mid: str, kind: str, lines: Sequence[str]) -> str:
    left, right = _SHAPES.get(kind, _SHAPES["agent"])
    label = "<br/>".join(_mermaid_text(x) for x in lines if x)
    return f"    {mid}{left}{label}{right}"


def _second_line(kind: str, role: str | None) -> str:
    return role if role else kind


def _router_text(r: RouterSpec) -> str:
    """Who decides a router's edges: ``router: pick()`` (a function), ``router: llm`` or
    ``router: llm <name>`` (a model other than the default), ``router: <name>`` (a router object)."""
    if r.kind == "function":
        who = f"{r.function}()"
    elif r.kind == "router":
        who = str(r.router)
    else:
        who = "llm" if r.llm == "default" else f"llm {r.llm}"
    return f"router: {who}" + (" (multi)" if r.multi else "")


def _graph_node_lines(graph: Graph, nid: str) -> list[str]:
    """``id``, role (or kind), then the agent's tools and the node's router, if any."""
    n = graph.node(nid)
    lines = [nid, _second_line(n.kind, n.role)]
    if n.tools:
        lines.append("tools: " + ", ".join(n.tools))
    r = graph.routers.get(nid)
    if r is not None:
        lines.append(_router_text(r))
    return lines


def _targets_end(graph: Graph) -> bool:
    return any(t == END for _, t, _ in graph.conditional_edges())


def graph_to_mermaid(graph: Graph, *, direction: Direction = "TD") -> str:
    """A Mermaid flowchart of ``graph``: one node per spec node (``id<br/>role``), one arrow per edge.

    Static edges are solid arrows; a router's edges are dashed
    (``a -.->|label| b``, unlabelled when the router gives that target no
    label), after the static ones in router declaration order; a router
    target ``END`` points at a terminal ``END((END))`` circle (id ``END_``),
    drawn only when some router targets ``END``.
    """
    d = _check_direction(direction)
    conditional = graph.conditional_edges()
    names = list(graph.nodes) + ([_END_KEY] if _targets_end(graph) else [])
    ids = _mermaid_ids(names)
    out = [f"flowchart {d}", f"    %% {_mermaid_text(graph.spec.name)}"]
    for nid in graph.nodes:
        out.append(_node_line(ids[nid], graph.node(nid).kind, _graph_node_lines(graph, nid)))
    if _END_KEY in ids:
        out.append(_node_line(ids[_END_KEY], "end", [END]))
    for e in graph.spec.edges:
        label = f"|{_mermaid_text(e.label)}|" if e.label else ""
        out.append(f"    {ids[e.source]} -->{label} {ids[e.target]}")
    for source, target, text in conditional:
        label = f"|{_mermaid_text(text)}|" if text else ""
        out.append(f"    {ids[source]} -.->{label} {ids[_target_key(target)]}")
    out.append("    classDef final stroke-width:3px")
    out.append(f"    class {ids[graph.final]} final")
    return "\n".join(out) + "\n"


@dataclass
class _TraceNode:
    kind: str
    role: str | None
    calls: int = 0
    tool_calls: int = 0
    waiting: bool = False
    # False while the kind is a guess (the node was only a receiver, or only made a router decision,
    # a tool call or a waiting interrupt so far); the node's own output event then settles it.
    known: bool = True

    def lines(self, nid: str) -> list[str]:
        out = [nid, _second_line(self.kind, self.role), _count(self.calls, "call")]
        if self.tool_calls:
            out.append(_count(self.tool_calls, "tool call"))
        if self.waiting:
            out.append("waiting for input")
        return out


def _trace_nodes(trace: Trace, graph: Graph | None) -> dict[str, _TraceNode]:
    """Every node a trace or its graph mentions, graph order first, then order of appearance.

    ``calls`` counts a node's messages (an agent's tool-loop turns count once,
    with the final answer); ``tool_calls`` its ``tool_call`` events;
    ``waiting`` is set when its last event (router decisions aside) is an
    interrupt still waiting.
    """
    nodes: dict[str, _TraceNode] = {}
    if graph is not None:
        for nid in graph.nodes:
            spec = graph.node(nid)
            nodes[nid] = _TraceNode(spec.kind, spec.role)
    for ev in trace:
        message = _is_message(ev)
        node = nodes.get(ev.sender)
        if node is None:
            guess = "agent" if ev.kind in _NOT_MESSAGES else ev.kind or "agent"
            node = nodes[ev.sender] = _TraceNode(guess, None, known=message)
        elif message and not node.known:
            node.kind, node.known = ev.kind, True
        if ev.kind != "router":
            node.waiting = _is_waiting(ev)
        if ev.kind == "tool_call":
            node.tool_calls += 1
        elif message:
            node.calls += 1
        if node.role is None and ev.role:
            node.role = ev.role
        if ev.kind == "tool_call":
            continue  # its receiver is the calling agent itself
        reached = list(ev.receivers)
        if ev.kind == "router":  # the targets it might have chosen are nodes too
            reached += [str(t) for t in ev.meta.get("allowed") or () if t != END]
        for r in reached:
            if r not in nodes:
                nodes[r] = _TraceNode("agent", None, known=False)
    return nodes


@dataclass
class _TraceEdge:
    source: str
    target: str  # a node id, or _END_KEY
    tokens: int | None  # completion tokens carried; None: it carried no message
    conditional: bool = False
    label: str | None = None
    taken: int = 0  # how often a router chose it
    messages: int = 0  # messages along it
    chars: int = 0  # their characters (what a function or tool node's message carries: no tokens)

    @property
    def used(self) -> bool:
        return self.tokens is not None or self.taken > 0

    def text(self) -> str:
        """A used edge's label: tokens (``123 tok``), and for a router's edge how often it was chosen
        first (``2x, 123 tok``; ``1x`` to END) after the router's label (``code: 2x, 123 tok``)."""
        if not self.conditional:
            return self.carried()
        parts = [f"{self.taken}x"] if self.taken else []
        if self.tokens is not None:
            parts.append(self.carried())
        text = ", ".join(parts)
        return f"{self.label}: {text}" if self.label else text

    def carried(self) -> str:
        """What the edge's messages carried: their tokens, or, from a node that generates none
        (a function or tool node), how many messages and characters."""
        if self.tokens:
            return f"{self.tokens} tok"
        return f"{_count(self.messages, 'msg')}, {self.chars} chars"


def _edge_tokens(trace: Trace) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Completion tokens, messages and characters along each (sender, receiver) pair, counting
    node messages only (:meth:`Trace.edge_tokens` would add routers' and tool calls' own events)."""
    out: dict[tuple[str, str], tuple[int, int, int]] = {}
    for e in trace:
        if not _is_message(e):
            continue
        for r in e.receivers:
            tok, n, chars = out.get((e.sender, r), (0, 0, 0))
            out[(e.sender, r)] = (tok + e.completion_tokens, n + 1, chars + len(e.output or ""))
    return out


def _trace_edges(trace: Trace, graph: Graph | None) -> list[_TraceEdge]:
    """Static graph edges (``tokens`` None when never used), then router edges (the graph's, then
    any other a router event lists as allowed), then pairs only the trace shows."""
    tokens = _edge_tokens(trace)
    labels: dict[tuple[str, str], str | None] = {}
    taken: dict[tuple[str, str], int] = {}
    if graph is not None:
        for source, target, text in graph.conditional_edges():
            labels[(source, _target_key(target))] = text
    for ev in trace:
        if ev.kind != "router":
            continue
        for t in ev.meta.get("allowed") or ():
            labels.setdefault((ev.sender, _target_key(str(t))), None)
        chosen = ev.meta.get("choices")
        for t in chosen if chosen is not None else ev.receivers:
            pair = (ev.sender, _target_key(str(t)))
            labels.setdefault(pair, None)
            taken[pair] = taken.get(pair, 0) + 1
    out: list[_TraceEdge] = []
    seen: set[tuple[str, str]] = set()

    def edge(pair: tuple[str, str], conditional: bool = False, text: str | None = None) -> _TraceEdge:
        if pair in tokens:
            tok, n, chars = tokens[pair]
            return _TraceEdge(pair[0], pair[1], tok, conditional, text, taken.get(pair, 0), n, chars)
        return _TraceEdge(pair[0], pair[1], None, conditional, text, taken.get(pair, 0))

    if graph is not None:
        for pair in graph.edges:
            out.append(edge(pair))
            seen.add(pair)
    for pair, text in labels.items():
        if pair not in seen:
            out.append(edge(pair, True, text))
            seen.add(pair)
    for pair in tokens:
        if pair not in seen:
            out.append(edge(pair))
            seen.add(pair)
    return out


def _trace_model(trace: Trace, graph: Graph | None) -> tuple[dict[str, _TraceNode], list[_TraceEdge]]:
    """The nodes and edges of a trace drawing; every edge's ends are among the nodes (or END)."""
    nodes = _trace_nodes(trace, graph)
    edges = _trace_edges(trace, graph)
    for e in edges:
        for end in (e.source, e.target):
            if end != _END_KEY and end not in nodes:
                nodes[end] = _TraceNode("agent", None, known=False)
    return nodes, edges


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def trace_to_mermaid(trace: Trace, graph: Graph | None = None, *, direction: Direction = "TD") -> str:
    """A Mermaid flowchart of a run: edges labelled with the tokens they carried, nodes with their calls.

    With ``graph``, its edges that carried nothing are drawn dotted and its
    final node bold. A router's edges (from ``graph``, else from the trace's
    router events) are drawn solid when taken, labelled with how often
    (``sup -->|2x, 40 tok| a``), and dashed and faint (a ``linkStyle`` line)
    when never taken; a router that chose or may choose ``END`` points at a
    terminal ``END`` circle. Tool calls are counted on their agent's node.
    """
    d = _check_direction(direction)
    nodes, edges = _trace_model(trace, graph)
    names = list(nodes) + ([_END_KEY] if any(e.target == _END_KEY for e in edges) else [])
    ids = _mermaid_ids(names)
    out = [f"flowchart {d}"]
    for nid, info in nodes.items():
        out.append(_node_line(ids[nid], info.kind, info.lines(nid)))
    if _END_KEY in ids:
        out.append(_node_line(ids[_END_KEY], "end", [END]))
    faint: list[int] = []
    for i, e in enumerate(edges):
        a, b = ids[e.source], ids[e.target]
        if e.used:
            out.append(f"    {a} -->|{_mermaid_text(e.text())}| {b}")
        elif e.conditional:
            label = f"|{_mermaid_text(e.label)}|" if e.label else ""
            out.append(f"    {a} -.->{label} {b}")
            faint.append(i)
        else:
            out.append(f"    {a} -.-> {b}")
    if faint:
        out.append(f"    linkStyle {','.join(map(str, faint))} {_FAINT_MERMAID}")
    if graph is not None:
        out.append("    classDef final stroke-width:3px")
        out.append(f"    class {ids[graph.final]} final")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# PNG
# ---------------------------------------------------------------------------


@dataclass
class _DrawNode:
    label: str
    kind: str
    final: bool = False


@dataclass
class _DrawEdge:
    source: str
    target: str
    width: float
    label: str | None = None
    dashed: bool = False
    faint: bool = False


def layout_positions(
    layers: list[list[str]], links: set[tuple[str, str]] | None = None
) -> dict[str, tuple[float, float]]:
    """Layers left to right, the nodes of a layer spread and centred on y.

    A layer of three or more nodes that talk to each other (a cyclic component:
    a debate, a society) is laid on a circle instead, so that its edges fan out
    rather than overlap along one column."""
    pos: dict[str, tuple[float, float]] = {}
    x = 0.0
    for layer in layers:
        k = len(layer)
        members = set(layer)
        talking = k >= 3 and any(a in members and b in members and a != b for a, b in (links or ()))
        if talking:
            r = max(1.0, 0.32 * k)
            x += r - 0.5
            for j, n in enumerate(layer):
                ang = math.pi / 2 - 2 * math.pi * j / k
                pos[n] = (x + r * math.cos(ang), r * math.sin(ang))
            x += r + 1.5
        else:
            for j, n in enumerate(layer):
                pos[n] = (x, (k - 1) / 2.0 - j)
            x += 1.0
    return pos


def _box_pad(kind: str) -> float:
    """The pad of a node's box style, in units of the font size."""
    return float(_BOX.get(kind, _BOX["agent"]).split("pad=")[1])


def _edge_gap(half: tuple[float, float], circle: bool, dx: float, dy: float) -> float:
    """Distance (in the units of ``half``) from a box's centre to its border along ``(dx, dy)``."""
    hw, hh = half
    if circle:
        return max(hw, hh)
    n = math.hypot(dx, dy)
    if n == 0.0:
        return 0.0
    ux, uy = abs(dx) / n, abs(dy) / n
    return min(hw / ux if ux else math.inf, hh / uy if uy else math.inf)


def _arc_hits(
    a: tuple[float, float],
    b: tuple[float, float],
    rad: float,
    boxes: Sequence[tuple[tuple[float, float], tuple[float, float]]],
    px_per_pt: float,
) -> int:
    """How many of 64 points along matplotlib's ``arc3,rad=rad`` curve from ``a`` to ``b``
    (pixels; a quadratic Bezier through the control point below) fall in one of ``boxes``
    (centre in pixels, half-size in points, with a margin)."""
    cx, cy = (a[0] + b[0]) / 2 + rad * (b[1] - a[1]), (a[1] + b[1]) / 2 - rad * (b[0] - a[0])
    steps = 64
    hits = 0
    for k in range(1, steps):
        t = k / steps
        u = 1.0 - t
        x = u * u * a[0] + 2 * u * t * cx + t * t * b[0]
        y = u * u * a[1] + 2 * u * t * cy + t * t * b[1]
        for (bx, by), (hw, hh) in boxes:
            if abs(x - bx) <= (hw + 5.0) * px_per_pt and abs(y - by) <= (hh + 5.0) * px_per_pt:
                hits += 1
                break
    return hits


# Curvatures tried, in order, for an edge until one clears every other node's box. arc3 bends to
# the left of travel, so B->A with bend -r is A->B's curve with bend r: the second edge of a pair
# keeps its bend at least _PAIR_APART away from that, and neither of a pair runs straight.
_BENDS = (0.0, 0.2, -0.2, 0.35, -0.35, 0.5, -0.5, 0.7, -0.7, 0.9, -0.9)
_PAIR_APART = 0.3


def _clear_of_chord(
    outward: tuple[float, float, float, float], extent: Bbox, ax: Axes
) -> tuple[float, float]:
    """Where a label centred ``(ox, oy)`` pixels from a chord's middle ``(x, y)`` goes (data
    coordinates): as far out along that direction as needed for its box (``extent``) to clear the chord."""
    x, y, ox, oy = outward
    dist = math.hypot(ox, oy)
    ux, uy = ox / dist, oy / dist
    need = abs(ux) * extent.width / 2 + abs(uy) * extent.height / 2 + 3.0
    scale = max(dist, need)
    px, py = ax.transData.inverted().transform((x + ux * scale, y + uy * scale))
    return float(px), float(py)


def _head(width: float) -> float:
    """Arrowhead size for a line ``width`` points wide: always clearly wider than the line."""
    return 10.0 + 3.0 * width


def _draw(
    nodes: dict[str, _DrawNode],
    edges: list[_DrawEdge],
    layers: list[list[str]],
    path: str | Path,
    title: str | None,
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = _figure(nodes, edges, layers, title)
    width, height = fig.get_size_inches()
    dpi = 100 if max(width, height) <= 20 else 70
    fig.savefig(path, format="png", dpi=dpi, bbox_inches="tight")
    log.debug("rendered %d nodes and %d edges to %s", len(nodes), len(edges), path)
    return path


def _figure(
    nodes: dict[str, _DrawNode],
    edges: list[_DrawEdge],
    layers: list[list[str]],
    title: str | None,
) -> Figure:
    pos = layout_positions(layers, {(e.source, e.target) for e in edges})
    xs0 = [p[0] for p in pos.values()] or [0.0]
    ys0 = [p[1] for p in pos.values()] or [0.0]
    span_x = max(xs0) - min(xs0) + 1.0
    span_y = max(ys0) - min(ys0) + 1.0
    width = min(max(2.2 * span_x + 1.0, 4.0), 36.0)
    height = min(max(1.3 * span_y + 1.2, 3.0), 36.0)
    total = len(nodes)
    fontsize = 9.0 if total <= 12 else 7.5 if total <= 40 else 6.0

    fig = Figure(figsize=(width, height))
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_axis_off()
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)

    # Nodes first, so that each arrow can be shrunk to end at the border of its boxes: half the
    # box's width and height in points (the text's extent plus the style's pad).
    renderer = canvas.get_renderer()
    px_to_pt = 72.0 / fig.dpi
    half: dict[str, tuple[float, float]] = {}
    for nid, node in nodes.items():
        if nid not in pos:
            continue
        x, y = pos[nid]
        text = ax.text(
            x,
            y,
            node.label,
            fontsize=fontsize,
            ha="center",
            va="center",
            zorder=3,
            bbox={
                "boxstyle": _BOX.get(node.kind, _BOX["agent"]),
                "fc": _FACE.get(node.kind, _FACE["agent"]),
                "ec": "#1f1f1f",
                "lw": 2.4 if node.final else 0.9,
            },
        )
        extent = text.get_window_extent(renderer)
        pad = _box_pad(node.kind) * fontsize
        half[nid] = (extent.width * px_to_pt / 2 + pad, extent.height * px_to_pt / 2 + pad)

    display = {nid: tuple(ax.transData.transform(pos[nid])) for nid in half}
    pairs = {(e.source, e.target) for e in edges}
    chosen: dict[tuple[str, str], float] = {}  # the bend of each edge drawn so far
    # Thick edges first: a thin edge's arrowhead is then drawn over them, not hidden below.
    for e in sorted(edges, key=lambda e: -e.width):
        if e.source not in pos or e.target not in pos:
            continue
        (x1, y1), (x2, y2) = pos[e.source], pos[e.target]
        style = "--" if e.dashed else "-"
        colour = _FAINT_EDGE_COLOUR if e.faint else _EDGE_COLOUR
        if e.source == e.target:
            # A self-loop: a small arc over the node.
            patch = FancyArrowPatch(
                (x1 - 0.15, y1 + 0.18),
                (x1 + 0.15, y1 + 0.18),
                connectionstyle="arc3,rad=-1.6",
                arrowstyle="-|>",
                mutation_scale=_head(e.width) - 2.0,
                lw=e.width,
                linestyle=style,
                color=colour,
                zorder=1,
            )
            ax.add_patch(patch)
            label_xy = (x1, y1 + 0.45)
            outward: tuple[float, float, float, float] | None = None
        else:
            # Curve edges that run within a column, run backwards, or have a reverse partner, so
            # that none hides behind another; and bend each as little as it takes to pass clear
            # of every other node's box (a straight chord across a circle of personas would not).
            (a1, b1), (a2, b2) = ax.transData.transform([(x1, y1), (x2, y2)])
            paired = (e.target, e.source) in pairs
            bends: tuple[float, ...] = _BENDS[1:] if paired or x1 == x2 or x2 < x1 else _BENDS
            partner = chosen.get((e.target, e.source))
            if partner is not None:
                bends = tuple(r for r in bends if abs(r + partner) >= _PAIR_APART)
            others = [(display[n], half[n]) for n in display if n not in (e.source, e.target)]
            # The first bend that clears every box, else the one that crosses the least.
            rad = min(bends, key=lambda r: _arc_hits((a1, b1), (a2, b2), r, others, 1.0 / px_to_pt))
            chosen[(e.source, e.target)] = rad
            # arc3 leaves each end towards its control point (display coordinates).
            cx, cy = (a1 + a2) / 2 + rad * (b2 - b1), (b1 + b2) / 2 - rad * (a2 - a1)
            gap_a = _edge_gap(half[e.source], nodes[e.source].kind == "end", cx - a1, cy - b1)
            gap_b = _edge_gap(half[e.target], nodes[e.target].kind == "end", cx - a2, cy - b2)
            patch = FancyArrowPatch(
                (x1, y1),
                (x2, y2),
                connectionstyle=f"arc3,rad={rad}",
                arrowstyle="-|>",
                mutation_scale=_head(e.width),
                shrinkA=gap_a + 2.0,
                shrinkB=gap_b + 2.0,
                lw=e.width,
                linestyle=style,
                color=colour,
                zorder=1,
            )
            ax.add_patch(patch)
            # Label at the curve's midpoint: half-way from the chord's middle to the control point.
            mx, my = ax.transData.inverted().transform(((a1 + a2 + 2 * cx) / 4, (b1 + b2 + 2 * cy) / 4))
            label_xy = (float(mx), float(my))
            # An edge with a reverse partner keeps its label clear of the chord, where the partner's is.
            outward = None
            if (e.target, e.source) in pairs and rad:
                outward = (
                    (a1 + a2) / 2,
                    (b1 + b2) / 2,
                    (cx - a1 / 2 - a2 / 2) / 2,
                    (cy - b1 / 2 - b2 / 2) / 2,
                )
        if e.label:
            text = ax.text(
                label_xy[0],
                label_xy[1],
                e.label,
                fontsize=fontsize * 0.85,
                ha="center",
                va="center",
                color=_FAINT_LABEL_COLOUR if e.faint else _LABEL_COLOUR,
                zorder=4,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
            )
            if outward is not None:
                text.set_position(_clear_of_chord(outward, text.get_window_extent(renderer), ax))

    if title:
        ax.set_title(title, fontsize=fontsize + 3)
    return fig


def _flow_layers(order: list[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Topological layers of ``order`` over ``edges`` (static and router edges, END last)."""
    dg = nx.DiGraph()
    dg.add_nodes_from(order)
    dg.add_edges_from(edges)
    return topological_layers_of(dg, order)


def render_graph_png(graph: Graph, path: str | Path, *, title: str | None = None) -> Path:
    """Draw ``graph`` to a PNG file at ``path`` (parents created); returns the path.

    Title defaults to the graph's name. A router's edges are dashed, with
    their labels; a router target ``END`` is a grey ``END`` circle.
    """
    final = graph.final if len(graph) else None
    nodes = {
        nid: _DrawNode("\n".join(_graph_node_lines(graph, nid)), graph.node(nid).kind, nid == final)
        for nid in graph.nodes
    }
    edges = [_DrawEdge(e.source, e.target, 1.3, e.label or None) for e in graph.spec.edges]
    conditional = graph.conditional_edges()
    if not conditional:
        layers = graph.topological_layers()
    else:
        for source, target, text in conditional:
            edges.append(_DrawEdge(source, _target_key(target), 1.3, text, dashed=True))
        if _targets_end(graph):
            nodes[_END_KEY] = _DrawNode(END, "end")
        layers = _flow_layers(list(nodes), [(e.source, e.target) for e in edges])
    return _draw(nodes, edges, layers, path, title if title is not None else graph.spec.name)


def render_trace_png(
    trace: Trace, path: str | Path, graph: Graph | None = None, *, title: str | None = None
) -> Path:
    """Draw a run to a PNG file: edges labelled and thickened by the tokens they carried, nodes with call counts.

    The layout comes from ``graph`` and the trace's edges together (a
    router's edges and END included). A router edge that was taken is solid,
    labelled with how often it was chosen and its tokens; one never taken is
    dashed and faint. An edge out of a node that generates no tokens (a
    function or tool node) is labelled with its messages and characters.
    Each edge bends as little as it takes to pass clear of the other nodes,
    and arrowheads grow with the line. The title counts the run's messages
    (not router decisions or tool calls) and its agents' tokens.
    """
    nodes, edges, layers, head = _trace_drawing(trace, graph, title)
    return _draw(nodes, edges, layers, path, head)


def trace_figure(trace: Trace, graph: Graph | None = None, *, title: str | None = None) -> Figure:
    """The drawing of :func:`render_trace_png` as a matplotlib ``Figure`` (for a notebook, or to
    add to before saving)."""
    nodes, edges, layers, head = _trace_drawing(trace, graph, title)
    return _figure(nodes, edges, layers, head)


def _trace_drawing(
    trace: Trace, graph: Graph | None, title: str | None
) -> tuple[dict[str, _DrawNode], list[_DrawEdge], list[list[str]], str]:
    info, edge_list = _trace_model(trace, graph)
    final = graph.final if graph is not None and len(graph) else None
    nodes = {nid: _DrawNode("\n".join(n.lines(nid)), n.kind, nid == final) for nid, n in info.items()}
    if any(e.target == _END_KEY for e in edge_list):
        nodes[_END_KEY] = _DrawNode(END, "end")
    layers = _flow_layers(list(nodes), [(e.source, e.target) for e in edge_list])
    top = max((e.tokens for e in edge_list if e.tokens), default=0)
    edges = []
    for e in edge_list:
        if not e.used:
            edges.append(_DrawEdge(e.source, e.target, 0.8, e.label, dashed=True, faint=e.conditional))
        else:
            tok = e.tokens or 0
            width = 0.8 + 3.2 * (math.sqrt(tok / top) if top else 0.0)
            edges.append(_DrawEdge(e.source, e.target, width, e.text()))
    if title is None:
        totals = trace.totals()
        name = graph.spec.name if graph is not None else "trace"
        messages = sum(1 for e in trace if _is_message(e))
        title = f"{name}: {messages} messages, {totals.tokens} tokens"
    return nodes, edges, layers, title

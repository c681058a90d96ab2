"""Drawings of graphs and traces: Mermaid text and PNG images.

Mermaid (:func:`graph_to_mermaid`, :func:`trace_to_mermaid`) pastes into
Markdown, GitHub and notebooks; agent nodes are rectangles, function nodes
subroutine boxes, tool nodes hexagons, and the final node is drawn bold.
Trace drawings label each edge with the completion tokens it carried
(``a -->|123 tok| b``) and each node with its number of calls.

PNG (:func:`render_graph_png`, :func:`render_trace_png`) uses matplotlib's
Agg canvas directly (no pyplot, no display, no global backend switch). Nodes
are placed by :meth:`Graph.topological_layers` from left to right, so the
members of a cycle (a debate) stand in one column with curved edges between
them; for a trace, line width grows with the tokens an edge carried.
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
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch

from .graph import Graph, topological_layers_of
from .trace import NodeKind, Trace

log = logging.getLogger(__name__)

__all__ = [
    "Direction",
    "graph_to_mermaid",
    "layout_positions",
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
_SHAPES = {"agent": ('["', '"]'), "function": ('[["', '"]]'), "tool": ('{{"', '"}}')}
_FACE = {"agent": "#dbe9f6", "function": "#e5f5e0", "tool": "#fdebd0"}
_BOX = {"agent": "round,pad=0.35", "function": "square,pad=0.35", "tool": "roundtooth,pad=0.35"}


# ---------------------------------------------------------------------------
# Mermaid
# ---------------------------------------------------------------------------


def _mermaid_ids(names: Sequence[str]) -> dict[str, str]:
    """Unique Mermaid-safe ids: letters, digits and ``_``; never a keyword, never starting with a digit."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "node"
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


def graph_to_mermaid(graph: Graph, *, direction: Direction = "TD") -> str:
    """A Mermaid flowchart of ``graph``: one node per spec node (``id<br/>role``), one arrow per edge."""
    d = _check_direction(direction)
    ids = _mermaid_ids(graph.nodes)
    out = [f"flowchart {d}", f"    %% {_mermaid_text(graph.spec.name)}"]
    for nid in graph.nodes:
        n = graph.node(nid)
        out.append(_node_line(ids[nid], n.kind, [nid, _second_line(n.kind, n.role)]))
    for e in graph.spec.edges:
        label = f"|{_mermaid_text(e.label)}|" if e.label else ""
        out.append(f"    {ids[e.source]} -->{label} {ids[e.target]}")
    out.append("    classDef final stroke-width:3px")
    out.append(f"    class {ids[graph.final]} final")
    return "\n".join(out) + "\n"


@dataclass
class _TraceNode:
    kind: NodeKind
    role: str | None
    calls: int = 0


def _trace_nodes(trace: Trace, graph: Graph | None) -> dict[str, _TraceNode]:
    """Every node a trace or its graph mentions, graph order first, then order of appearance."""
    nodes: dict[str, _TraceNode] = {}
    if graph is not None:
        for nid in graph.nodes:
            spec = graph.node(nid)
            nodes[nid] = _TraceNode(spec.kind, spec.role)
    for ev in trace:
        if ev.sender not in nodes:
            nodes[ev.sender] = _TraceNode(ev.kind or "agent", ev.role)
        node = nodes[ev.sender]
        node.calls += 1
        if node.role is None and ev.role:
            node.role = ev.role
        for r in ev.receivers:
            if r not in nodes:
                nodes[r] = _TraceNode("agent", None)
    return nodes


def _trace_edges(trace: Trace, graph: Graph | None) -> list[tuple[str, str, int | None]]:
    """``(source, target, tokens)``; graph edges the trace never used carry ``None``."""
    tokens = trace.edge_tokens()
    out: list[tuple[str, str, int | None]] = []
    seen: set[tuple[str, str]] = set()
    if graph is not None:
        for pair in graph.edges:
            out.append((pair[0], pair[1], tokens.get(pair)))
            seen.add(pair)
    for pair, tok in tokens.items():
        if pair not in seen:
            out.append((pair[0], pair[1], tok))
            seen.add(pair)
    return out


def _calls_text(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


def trace_to_mermaid(trace: Trace, graph: Graph | None = None, *, direction: Direction = "TD") -> str:
    """A Mermaid flowchart of a run: edges labelled with the tokens they carried, nodes with their calls.

    With ``graph``, its edges that carried nothing are drawn dotted and its
    final node bold.
    """
    d = _check_direction(direction)
    nodes = _trace_nodes(trace, graph)
    ids = _mermaid_ids(list(nodes))
    out = [f"flowchart {d}"]
    for nid, info in nodes.items():
        out.append(
            _node_line(
                ids[nid], info.kind, [nid, _second_line(info.kind, info.role), _calls_text(info.calls)]
            )
        )
    for a, b, tok in _trace_edges(trace, graph):
        if tok is None:
            out.append(f"    {ids[a]} -.-> {ids[b]}")
        else:
            out.append(f"    {ids[a]} -->|{tok} tok| {ids[b]}")
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
    kind: NodeKind
    final: bool = False


@dataclass
class _DrawEdge:
    source: str
    target: str
    width: float
    label: str | None = None
    dashed: bool = False


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


def _draw(
    nodes: dict[str, _DrawNode],
    edges: list[_DrawEdge],
    layers: list[list[str]],
    path: str | Path,
    title: str | None,
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pos = layout_positions(layers, {(e.source, e.target) for e in edges})
    xs0 = [p[0] for p in pos.values()] or [0.0]
    ys0 = [p[1] for p in pos.values()] or [0.0]
    span_x = max(xs0) - min(xs0) + 1.0
    span_y = max(ys0) - min(ys0) + 1.0
    width = min(max(2.2 * span_x + 1.0, 4.0), 36.0)
    height = min(max(1.3 * span_y + 1.2, 3.0), 36.0)
    total = len(nodes)
    fontsize = 9.0 if total <= 12 else 7.5 if total <= 40 else 6.0
    # Shrink arrows so that they end at the box edge rather than the centre.
    shrink = fontsize * 2.4

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_axis_off()
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)

    pairs = {(e.source, e.target) for e in edges}
    for e in edges:
        if e.source not in pos or e.target not in pos:
            continue
        (x1, y1), (x2, y2) = pos[e.source], pos[e.target]
        style = "--" if e.dashed else "-"
        if e.source == e.target:
            # A self-loop: a small arc over the node.
            patch = FancyArrowPatch(
                (x1 - 0.15, y1 + 0.18),
                (x1 + 0.15, y1 + 0.18),
                connectionstyle="arc3,rad=-1.6",
                arrowstyle="-|>",
                mutation_scale=10,
                lw=e.width,
                linestyle=style,
                color="#444444",
                zorder=1,
            )
            ax.add_patch(patch)
            label_xy = (x1, y1 + 0.45)
        else:
            # Curve edges that run within a column, run backwards, or have a
            # reverse partner, so that none hides behind another.
            rad = 0.0
            if x1 == x2 or x2 < x1 or (e.target, e.source) in pairs:
                rad = 0.25
            patch = FancyArrowPatch(
                (x1, y1),
                (x2, y2),
                connectionstyle=f"arc3,rad={rad}",
                arrowstyle="-|>",
                mutation_scale=12,
                shrinkA=shrink,
                shrinkB=shrink,
                lw=e.width,
                linestyle=style,
                color="#444444",
                zorder=1,
            )
            ax.add_patch(patch)
            # Label at the curve's midpoint: half-way to arc3's control point.
            mx, my = (x1 + x2) / 2.0, (y1 + y2) / 2.0
            label_xy = (mx + 0.5 * rad * (y2 - y1), my - 0.5 * rad * (x2 - x1))
        if e.label:
            ax.text(
                label_xy[0],
                label_xy[1],
                e.label,
                fontsize=fontsize * 0.85,
                ha="center",
                va="center",
                color="#1f3b73",
                zorder=4,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
            )

    for nid, node in nodes.items():
        if nid not in pos:
            continue
        x, y = pos[nid]
        ax.text(
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
    if title:
        ax.set_title(title, fontsize=fontsize + 3)
    dpi = 100 if max(width, height) <= 20 else 70
    fig.savefig(path, format="png", dpi=dpi, bbox_inches="tight")
    log.debug("rendered %d nodes and %d edges to %s", len(nodes), len(edges), path)
    return path


def render_graph_png(graph: Graph, path: str | Path, *, title: str | None = None) -> Path:
    """Draw ``graph`` to a PNG file at ``path`` (parents created); returns the path.

    Title defaults to the graph's name.
    """
    final = graph.final if len(graph) else None
    nodes = {
        nid: _DrawNode(
            f"{nid}\n{_second_line(graph.node(nid).kind, graph.node(nid).role)}",
            graph.node(nid).kind,
            nid == final,
        )
        for nid in graph.nodes
    }
    edges = [_DrawEdge(e.source, e.target, 1.3, e.label or None) for e in graph.spec.edges]
    return _draw(
        nodes, edges, graph.topological_layers(), path, title if title is not None else graph.spec.name
    )


def render_trace_png(
    trace: Trace, path: str | Path, graph: Graph | None = None, *, title: str | None = None
) -> Path:
    """Draw a run to a PNG file: edges labelled and thickened by the tokens they carried, nodes with call counts.

    The layout comes from ``graph`` when given (nodes the trace adds are
    placed by their edges), else from the trace's senders and receivers.
    """
    info = _trace_nodes(trace, graph)
    edge_list = _trace_edges(trace, graph)
    dg = nx.DiGraph()
    dg.add_nodes_from(info)
    dg.add_edges_from((a, b) for a, b, _ in edge_list)
    layers = topological_layers_of(dg, list(info))
    final = graph.final if graph is not None and len(graph) else None
    nodes = {
        nid: _DrawNode(f"{nid}\n{_second_line(n.kind, n.role)}\n{_calls_text(n.calls)}", n.kind, nid == final)
        for nid, n in info.items()
    }
    top = max((tok for _, _, tok in edge_list if tok), default=0)
    edges = []
    for a, b, tok in edge_list:
        if tok is None:
            edges.append(_DrawEdge(a, b, 0.8, None, dashed=True))
        else:
            width = 0.8 + 5.0 * (math.sqrt(tok / top) if top else 0.0)
            edges.append(_DrawEdge(a, b, width, f"{tok} tok"))
    if title is None:
        totals = trace.totals()
        name = graph.spec.name if graph is not None else "trace"
        title = f"{name}: {len(trace)} messages, {totals.tokens} tokens"
    return _draw(nodes, edges, layers, path, title)

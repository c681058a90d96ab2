"""societas.topology — how agents are wired and run.

Graph specs (pydantic, YAML/JSON) and their validation; :class:`Graph` on
networkx with metrics; the AgentConductor layered-YAML format with its four
typed parse failures; the :class:`Runtime`, which runs a graph in supersteps
and sends every ready agent that shares a model in one batched call; traces;
Mermaid and PNG rendering; and the topologies of the papers in
:mod:`societas.topology.patterns`.
"""

from . import patterns
from .errors import LogicInvalid, NoYAMLFound, SchemaInvalid, SpecError, TopologyParseError, YAMLSyntaxError
from .graph import Graph, GraphMetrics
from .layered import (
    DIFFICULTY_NODE_CAPS,
    LayeredAgent,
    LayeredTopology,
    extract_yaml,
    parse_layered_yaml,
    try_parse_layered_yaml,
)
from .render import graph_to_mermaid, render_graph_png, render_trace_png, trace_to_mermaid
from .runtime import NodeContext, NodeError, RunResult, Runtime
from .spec import BudgetSpec, EdgeSpec, GraphSpec, NodeSpec
from .trace import Trace, TraceEvent, TraceTotals

__all__ = [
    "patterns",
    "SpecError",
    "TopologyParseError",
    "NoYAMLFound",
    "YAMLSyntaxError",
    "SchemaInvalid",
    "LogicInvalid",
    "Graph",
    "GraphMetrics",
    "DIFFICULTY_NODE_CAPS",
    "LayeredAgent",
    "LayeredTopology",
    "extract_yaml",
    "parse_layered_yaml",
    "try_parse_layered_yaml",
    "graph_to_mermaid",
    "trace_to_mermaid",
    "render_graph_png",
    "render_trace_png",
    "NodeContext",
    "NodeError",
    "Runtime",
    "RunResult",
    "BudgetSpec",
    "EdgeSpec",
    "GraphSpec",
    "NodeSpec",
    "Trace",
    "TraceEvent",
    "TraceTotals",
]

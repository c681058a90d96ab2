"""societas.topology — how agents are wired and run.

Graph specs (pydantic, YAML/JSON) and their validation; :class:`Graph` on
networkx with metrics; the AgentConductor layered-YAML format with its four
typed parse failures; the :class:`Runtime`, which runs a graph in supersteps
and sends every ready agent that shares a model in one batched call; traces;
Mermaid and PNG rendering; a self-contained HTML page that steps through a
run message by message (:func:`write_trace_html`); and the topologies of the
papers in :mod:`societas.topology.patterns`.

Graphs also decide at run time: routers (:mod:`~societas.topology.routing`:
a function, an LLM, or any object with ``route(ctx)``, such as a learned
policy), loops that end on termination conditions
(:mod:`~societas.topology.conditions`), tool-calling agents, interrupts for a
person's answer, subgraphs, streamed events, and checkpoints that let a
killed run resume (:mod:`~societas.topology.checkpoint`) — and whatever is
ready in a superstep still shares one batched call per model.
"""

from . import patterns
from .checkpoint import Checkpoint, Checkpointer, CheckpointError, MemoryCheckpointer, SqliteCheckpointer
from .conditions import (
    AllOf,
    AnyOf,
    Condition,
    ConditionView,
    FunctionCondition,
    MaxMessages,
    MaxSteps,
    MaxTokens,
    TextMention,
    Timeout,
)
from .errors import LogicInvalid, NoYAMLFound, SchemaInvalid, SpecError, TopologyParseError, YAMLSyntaxError
from .executor import interrupt
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
from .routing import END, BatchRouter, RouteContext, Router, RoutingError, Send
from .run_state import GraphInterrupt
from .runtime import NodeContext, NodeError, RunEvent, RunResult, Runtime
from .spec import BudgetSpec, EdgeSpec, GraphSpec, NodeSpec, RouterSpec
from .trace import Trace, TraceEvent, TraceTotals
from .trace_html import trace_to_html, write_trace_html

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
    "trace_to_html",
    "write_trace_html",
    "NodeContext",
    "NodeError",
    "Runtime",
    "RunResult",
    "RunEvent",
    "RouterSpec",
    "END",
    "Send",
    "Router",
    "BatchRouter",
    "RouteContext",
    "RoutingError",
    "interrupt",
    "GraphInterrupt",
    "Checkpoint",
    "Checkpointer",
    "CheckpointError",
    "MemoryCheckpointer",
    "SqliteCheckpointer",
    "Condition",
    "ConditionView",
    "TextMention",
    "MaxSteps",
    "MaxMessages",
    "MaxTokens",
    "Timeout",
    "FunctionCondition",
    "AnyOf",
    "AllOf",
    "BudgetSpec",
    "EdgeSpec",
    "GraphSpec",
    "NodeSpec",
    "Trace",
    "TraceEvent",
    "TraceTotals",
]

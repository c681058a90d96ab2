"""Dynamic graphs, side by side with LangGraph, in one run on the same machine.

1. Router loop overhead: one Python function node ``step`` that adds one to a
   counter in the run's state, and a conditional edge (a function router)
   that sends the run back to ``step`` until it has run ``--steps`` times
   (200), then to END. societas: a message-mode graph, ``Runtime(...,
   functions=...)``; LangGraph: a ``StateGraph`` with ``add_conditional_edges``
   and a ``recursion_limit`` of steps + 10 (societas: ``max_steps`` likewise).
   The node work is trivial, so wall time / steps is the framework's
   overhead per step. Graphs are built and compiled once, outside the
   timing; each repeat runs the loop from the start, the two frameworks
   alternating, after one warm-up run of each; the figure is the median.
2. The same loop with a SQLite checkpointer, a checkpoint after every step:
   societas ``SqliteCheckpointer(path)`` and ``run(task, thread=...)``;
   LangGraph ``SqliteSaver`` (``langgraph.checkpoint.sqlite``) on a
   ``sqlite3`` connection and a ``thread_id`` config. Every repeat writes a
   fresh file in a temporary directory, opened (and its tables created) before
   the timing. Each library keeps its own settings: both files are in WAL
   mode; societas sets ``synchronous = NORMAL``, SqliteSaver leaves SQLite's
   default (``FULL``).
3. Concurrent ReAct agents on the embedded model: ``--agents`` (8) agents,
   each with the same two typed tools (``add``, ``multiply``) and its own
   arithmetic question, greedy decoding, at most ``--react-tokens`` (32)
   new tokens a turn and at most ``--max-tool-steps`` (3) model turns per
   agent. societas: one agent node with ``tools``, ``run_many`` over the
   questions, so each step's turns share one batched ``generate`` call.
   LangGraph: the ReAct graph a LangGraph user writes by hand (an ``agent``
   node, a conditional edge, a ``tools`` node, back to ``agent``) whose agent
   node calls the SAME model object's ``generate`` with one prompt at a time,
   speaking the same text protocol (``tools_system_prompt`` /
   ``parse_tool_calls`` / ``tool_results_message``) with the same turn limit,
   so both sides do the same work per turn; the agents run with LangGraph's
   own ``graph.batch`` (``max_concurrency`` = number of agents; threads, as
   LangGraph does it) by default, or one after another
   (``--langgraph-mode sequential``; ``both`` measures both and compares
   with the faster). Generated tokens are counted from the completions'
   usage (societas: the traces' ``completion_tokens``); the speed-up is
   societas tokens/s over LangGraph tokens/s. The table checks that both
   sides sent the same prompts and says how many tool calls each made (the
   embedded model is tiny and seldom calls a tool). Both sides run once,
   after a warm-up generation on the real prompts (one alone, then all).

The machine's other work skews every figure: the output ends with the share
of the CPU time that other processes used during the run (Linux).

Goals: router ratio >= 5, checkpoint ratio >= 3, ReAct speed-up >= 2.
``--profile`` runs the societas side of parts 1 and 2 under cProfile and
prints where the time goes per step, and how the cost per step grows with
the length of the loop.

Run: ``python benchmarks/dynamic_graphs.py`` (``--quick`` for a smoke run:
fewer steps and repeats, a tiny generation; ``--no-react`` skips part 3).
Prints a table and ends with one JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import platform
import pstats
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from societas.agents import load_llm
from societas.agents.llm.base import SamplingParams
from societas.agents.tools import (
    Tool,
    parse_tool_calls,
    run_tool_call,
    tool,
    tool_results_message,
    tools_system_prompt,
)
from societas.topology import END, GraphSpec, Runtime, SqliteCheckpointer

GOALS = {"router": 5.0, "checkpoint": 3.0, "react": 2.0}
SYSTEM = "You are a careful assistant. Use the tools for arithmetic."
QUESTIONS = (
    "What is 12 plus 30?",
    "What is 7 times 6?",
    "Add 123 and 456.",
    "Multiply 13 by 17.",
    "What is 2.5 times 4?",
    "What is 99 plus 1?",
    "Compute 8 times 9, then add 3.",
    "What is 1000 plus 2024?",
)


def _versions() -> dict[str, str]:
    out = {}
    for name in ("langgraph", "langgraph-checkpoint-sqlite"):
        try:
            out[name] = package_version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def _machine_busy_s() -> float | None:
    """CPU seconds the whole machine has spent busy so far (Linux ``/proc/stat``), else None."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        ticks = [int(x) for x in first[1:9]]  # user nice system idle iowait irq softirq steal
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class Contention:
    """The share of the machine's CPU time that other processes used while the benchmark ran."""

    def __init__(self) -> None:
        self.busy0, self.own0, self.t0 = _machine_busy_s(), time.process_time(), time.perf_counter()

    def share(self) -> float | None:
        busy = _machine_busy_s()
        if busy is None or self.busy0 is None:
            return None
        wall = time.perf_counter() - self.t0
        others = (busy - self.busy0) - (time.process_time() - self.own0)
        return max(0.0, others) / (wall * (os.cpu_count() or 1)) if wall > 0 else None


# -- 1 and 2: the router loop -------------------------------------------------------------


def societas_loop(steps: int, checkpointer: SqliteCheckpointer | None = None) -> Runtime:
    """The loop as a societas graph: ``step`` runs ``steps`` times, then its router says END."""
    spec = GraphSpec.from_data(
        {
            "name": "router-loop",
            "nodes": [{"id": "step", "kind": "function", "function": "step"}],
            "routers": [{"source": "step", "function": "again", "targets": ["step", "END"]}],
            "max_steps": steps + 10,
        }
    )

    def step(ctx: Any) -> str:
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        return str(ctx.state["n"])

    def again(ctx: Any) -> str:
        return "step" if ctx.state["n"] < steps else END

    return Runtime(spec, functions={"step": step, "again": again}, checkpointer=checkpointer)


def _check_societas(res: Any, steps: int) -> None:
    ran = sum(1 for e in res.trace if e.kind == "function")
    if ran != steps or res.output != str(steps) or res.stopped is not None:
        raise RuntimeError(f"societas loop ran {ran} steps (output {res.output!r}, stopped {res.stopped})")


def langgraph_loop(steps: int, checkpointer: Any = None) -> Any:
    """The loop as a compiled LangGraph ``StateGraph``."""
    from typing import TypedDict

    from langgraph.graph import END as LG_END
    from langgraph.graph import START, StateGraph

    # functional form: this module's postponed annotations would hide the field types
    State = TypedDict("State", {"n": int})  # noqa: UP013

    def step(state: Any) -> dict[str, int]:
        return {"n": state["n"] + 1}

    def again(state: Any) -> str:
        return "step" if state["n"] < steps else LG_END

    b = StateGraph(State)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", again, ["step", LG_END])
    return b.compile(checkpointer=checkpointer)


def _per_step(walls: list[float], steps: int) -> dict[str, float]:
    return {
        "us_per_step": statistics.median(walls) / steps * 1e6,
        "best_us_per_step": min(walls) / steps * 1e6,
    }


def router_overhead(steps: int, repeats: int) -> dict[str, Any]:
    rt = societas_loop(steps)
    app = langgraph_loop(steps)
    config = {"recursion_limit": steps + 10}

    def ours() -> float:
        t0 = time.perf_counter()
        res = rt.run("count")
        wall = time.perf_counter() - t0
        _check_societas(res, steps)
        return wall

    def theirs() -> float:
        t0 = time.perf_counter()
        out = app.invoke({"n": 0}, config)
        wall = time.perf_counter() - t0
        if out["n"] != steps:
            raise RuntimeError(f"LangGraph loop ran {out['n']} steps")
        return wall

    ours()  # warm-up
    theirs()
    s_walls, l_walls = [], []
    for _ in range(repeats):
        s_walls.append(ours())
        l_walls.append(theirs())
    s, lg = _per_step(s_walls, steps), _per_step(l_walls, steps)
    return {"societas": s, "langgraph": lg, "ratio": lg["us_per_step"] / s["us_per_step"]}


def checkpoint_overhead(steps: int, repeats: int) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory(prefix="dynamic-graphs-") as tmp:
        root = Path(tmp)
        counter = {"i": 0}

        def ours() -> tuple[float, int]:
            counter["i"] += 1
            cp = SqliteCheckpointer(root / f"societas-{counter['i']}.db")
            rt = societas_loop(steps, cp)
            try:
                t0 = time.perf_counter()
                res = rt.run("count", thread="loop")
                wall = time.perf_counter() - t0
                _check_societas(res, steps)
                saved = len(cp.list("loop", light=True))
            finally:
                cp.close()
            return wall, saved

        def theirs() -> tuple[float, int]:
            counter["i"] += 1
            conn = sqlite3.connect(str(root / f"langgraph-{counter['i']}.db"), check_same_thread=False)
            try:
                saver = SqliteSaver(conn)
                saver.setup()  # creates the tables, as opening a SqliteCheckpointer does
                app = langgraph_loop(steps, saver)
                config = {"recursion_limit": steps + 10, "configurable": {"thread_id": "loop"}}
                t0 = time.perf_counter()
                out = app.invoke({"n": 0}, config)
                wall = time.perf_counter() - t0
                if out["n"] != steps:
                    raise RuntimeError(f"LangGraph loop ran {out['n']} steps")
                saved = sum(1 for _ in saver.list({"configurable": {"thread_id": "loop"}}))
            finally:
                conn.close()
            return wall, saved

        ours()  # warm-up
        theirs()
        s_runs, l_runs = [], []
        for _ in range(repeats):
            s_runs.append(ours())
            l_runs.append(theirs())
    s = {**_per_step([w for w, _ in s_runs], steps), "checkpoints": s_runs[-1][1]}
    lg = {**_per_step([w for w, _ in l_runs], steps), "checkpoints": l_runs[-1][1]}
    return {"societas": s, "langgraph": lg, "ratio": lg["us_per_step"] / s["us_per_step"]}


def profile_societas(steps: int, runs: int, checkpoint: bool, top: int) -> str:
    """cProfile of the societas loop: the ``top`` functions by own time, in microseconds per step."""
    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="dynamic-graphs-profile-") as tmp:
        societas_loop(steps).run("count")  # warm-up outside the profile
        for i in range(runs):
            cp = SqliteCheckpointer(Path(tmp) / f"p{i}.db") if checkpoint else None
            rt = societas_loop(steps, cp)
            prof.enable()
            rt.run("count", thread="loop" if checkpoint else None)
            prof.disable()
            if cp is not None:
                cp.close()
    stats = pstats.Stats(prof, stream=io.StringIO())
    total_steps = steps * runs
    rows = []
    for (file, line, fn), (_cc, ncalls, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, ncalls, f"{Path(file).name}:{line}({fn})"))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    what = "with SqliteCheckpointer" if checkpoint else "no checkpointer"
    lines = [
        f"\n| societas loop, {what}: where the time goes ({runs} runs x {steps} steps under cProfile, "
        f"{total / total_steps * 1e6:.1f} us/step profiled) | own us/step | own % | cumulative us/step "
        "| calls/step |",
        "|---|---|---|---|---|",
    ]
    for tt, ct, ncalls, name in rows[:top]:
        lines.append(
            f"| {name} | {tt / total_steps * 1e6:.2f} | {tt / total:.1%} | {ct / total_steps * 1e6:.2f} "
            f"| {ncalls / total_steps:.1f} |"
        )
    return "\n".join(lines)


def scaling(lengths: Sequence[int], checkpoint: bool) -> dict[int, float]:
    """societas microseconds per step (median of 3) at several loop lengths: flat when a step costs O(1)."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="dynamic-graphs-scaling-") as tmp:
        societas_loop(lengths[0]).run("count")
        for n in lengths:
            walls = []
            for i in range(3):
                cp = SqliteCheckpointer(Path(tmp) / f"s{n}-{i}.db") if checkpoint else None
                rt = societas_loop(n, cp)
                t0 = time.perf_counter()
                rt.run("count", thread="loop" if checkpoint else None)
                walls.append(time.perf_counter() - t0)
                if cp is not None:
                    cp.close()
            out[n] = statistics.median(walls) / n * 1e6
    return out


# -- 3: concurrent ReAct agents ---------------------------------------------------------------


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a * b


TOOLS: tuple[Tool, ...] = (add, multiply)


def _react_spec(max_new_tokens: int, max_tool_steps: int) -> GraphSpec:
    return GraphSpec.from_data(
        {
            "name": "react",
            "nodes": [
                {
                    "id": "agent",
                    "role": "assistant",
                    "prompt": SYSTEM,
                    "tools": [t.name for t in TOOLS],
                    "max_tool_steps": max_tool_steps,
                    "params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
                }
            ],
        }
    )


def first_prompt(question: str) -> list[dict[str, str]]:
    """The first prompt of a ReAct agent: the system prompt with the tool protocol, then the question."""
    return [
        {"role": "system", "content": f"{SYSTEM}\n\n{tools_system_prompt(list(TOOLS))}"},
        {"role": "user", "content": question},
    ]


def react_societas(llm: Any, questions: Sequence[str], max_new_tokens: int, max_tool_steps: int) -> dict:
    rt = Runtime(_react_spec(max_new_tokens, max_tool_steps), llm=llm, tools=list(TOOLS))
    calls0 = llm.calls
    t0 = time.perf_counter()
    results = rt.run_many(list(questions))
    wall = time.perf_counter() - t0
    generate_calls = llm.calls - calls0
    transcripts = []
    for res in results:
        turns = [e for e in res.trace if e.kind == "agent"]
        transcripts.append([(list(e.prompt), e.output) for e in turns])
    return {
        "wall_s": wall,
        "tokens": sum(r.trace.totals().completion_tokens for r in results),
        "tool_calls": sum(1 for r in results for e in r.trace if e.kind == "tool_call"),
        "turns": sum(len(t) for t in transcripts),
        "generate_calls": generate_calls,
        "transcripts": transcripts,
    }


def langgraph_react_graph(llm: Any, params: SamplingParams, max_tool_steps: int) -> Any:
    """A hand-written LangGraph ReAct agent: ``agent`` -> (tool calls? ``tools`` -> ``agent`` : END).

    The agent node sends ONE prompt to ``llm.generate`` (what a LangGraph node
    calling a local Hugging Face model does) and follows the text protocol
    the way the societas Runtime does: a reply without tool calls, or the
    turn limit, ends the agent (the limit keeps the text outside the calls).
    """
    from typing import TypedDict

    from langgraph.graph import END as LG_END
    from langgraph.graph import START, StateGraph

    by_name = {t.name: t for t in TOOLS}
    State = TypedDict(  # noqa: UP013 (functional form: postponed annotations would hide the types)
        "State",
        {
            "messages": list,
            "turns": int,
            "pending": Any,
            "errors": list,
            "answer": Any,
            "tokens": int,
            "tool_calls": int,
            "transcript": list,
        },
    )

    def agent(state: Any) -> dict[str, Any]:
        messages = state["messages"]
        comp = llm.generate([messages], [params])[0][0]
        parsed = parse_tool_calls(comp.text, by_name)
        turn = state["turns"]
        update: dict[str, Any] = {
            "turns": turn + 1,
            "tokens": state["tokens"] + comp.usage.completion_tokens,
            "transcript": [*state["transcript"], (list(messages), comp.text)],
        }
        has_calls = bool(parsed.calls or parsed.errors)
        if not has_calls or turn + 1 >= max_tool_steps:
            update.update(answer=parsed.content if has_calls else comp.text, pending=None, errors=[])
        else:
            update.update(
                messages=[*messages, {"role": "assistant", "content": comp.text}],
                pending=list(parsed.calls),
                errors=list(parsed.errors),
            )
        return update

    def tools_node(state: Any) -> dict[str, Any]:
        calls = state["pending"]
        results = [run_tool_call(c, by_name) for c in calls]
        return {
            "messages": [*state["messages"], dict(tool_results_message(results, state["errors"]))],
            "pending": None,
            "errors": [],
            "tool_calls": state["tool_calls"] + len(calls),
        }

    def route(state: Any) -> str:
        return "tools" if state["pending"] is not None else LG_END

    b = StateGraph(State)
    b.add_node("agent", agent)
    b.add_node("tools", tools_node)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", route, ["tools", LG_END])
    b.add_edge("tools", "agent")
    return b.compile()


def react_langgraph(
    llm: Any, questions: Sequence[str], max_new_tokens: int, max_tool_steps: int, mode: str
) -> dict:
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    app = langgraph_react_graph(llm, params, max_tool_steps)
    inputs = [
        {
            "messages": first_prompt(q),
            "turns": 0,
            "pending": None,
            "errors": [],
            "answer": None,
            "tokens": 0,
            "tool_calls": 0,
            "transcript": [],
        }
        for q in questions
    ]
    config: dict[str, Any] = {"recursion_limit": 2 * max_tool_steps + 5}
    t0 = time.perf_counter()
    if mode == "batch":
        outs = app.batch(inputs, {**config, "max_concurrency": len(inputs)})
    else:
        outs = [app.invoke(x, config) for x in inputs]
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "tokens": sum(o["tokens"] for o in outs),
        "tool_calls": sum(o["tool_calls"] for o in outs),
        "turns": sum(o["turns"] for o in outs),
        "transcripts": [o["transcript"] for o in outs],
        "mode": mode,
    }


def _compare(ours: list[list[tuple[Any, str]]], theirs: list[list[tuple[Any, str]]]) -> dict[str, Any]:
    pairs = [(a, b) for ta, tb in zip(ours, theirs, strict=True) for a, b in zip(ta, tb)]
    firsts = [(ta[0][0], tb[0][0]) for ta, tb in zip(ours, theirs, strict=True) if ta and tb]
    return {
        "same_first_prompts": sum(a == b for a, b in firsts) / max(1, len(firsts)),
        "same_prompts": sum(a[0] == b[0] for a, b in pairs) / max(1, len(pairs)),
        "same_outputs": sum(a[1] == b[1] for a, b in pairs) / max(1, len(pairs)),
    }


def react(llm: Any, agents: int, max_new_tokens: int, max_tool_steps: int, mode: str) -> dict[str, Any]:
    """Both sides on the same questions and the same model object; ``mode``: batch, sequential or both."""
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(agents)]
    # Warm-up on the real prompts, in both shapes (one prompt; all of them), outside the timing:
    # the first forward passes of a process are much slower than the later ones.
    warm = SamplingParams(temperature=0.0, max_new_tokens=2)
    llm.generate([first_prompt(questions[0])], warm)
    llm.generate([first_prompt(q) for q in questions], warm)
    ours = react_societas(llm, questions, max_new_tokens, max_tool_steps)
    modes = ["batch", "sequential"] if mode == "both" else [mode]
    runs = [react_langgraph(llm, questions, max_new_tokens, max_tool_steps, m) for m in modes]
    for r in [ours, *runs]:
        r["tok_s"] = r["tokens"] / r["wall_s"] if r["wall_s"] > 0 else math.nan
    best = max(runs, key=lambda r: r["tok_s"])
    check = _compare(ours["transcripts"], best["transcripts"])
    if check["same_first_prompts"] != 1.0:
        raise RuntimeError("the two sides did not send the same first prompts")
    return {
        "societas": ours,
        "langgraph": runs,
        "best": best,
        "speedup": ours["tok_s"] / best["tok_s"],
        **check,
        "agents": agents,
        "max_new_tokens": max_new_tokens,
        "max_tool_steps": max_tool_steps,
    }


# -- output ---------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 20 steps, 2 repeats, a tiny generation")
    ap.add_argument("--steps", type=_positive_int, default=None, help="router loop length (200; quick 20)")
    ap.add_argument("--repeats", type=_positive_int, default=None, help="timed repeats (5; quick 2)")
    ap.add_argument("--no-react", action="store_true", help="skip the embedded-model ReAct part")
    ap.add_argument("--agents", type=_positive_int, default=None, help="concurrent ReAct agents (8; quick 2)")
    ap.add_argument(
        "--react-tokens", type=_positive_int, default=None, help="max new tokens per turn (32; quick 4)"
    )
    ap.add_argument("--max-tool-steps", type=_positive_int, default=3, help="model turns per agent (3)")
    ap.add_argument(
        "--langgraph-mode",
        choices=["batch", "sequential", "both"],
        default="batch",
        help="how the LangGraph agents run: graph.batch (threads), one after another, or both",
    )
    ap.add_argument("--profile", action="store_true", help="profile the societas side of the router loops")
    return ap.parse_args(argv)


def _goal(value: float | None, name: str) -> str:
    if value is None:
        return ""
    return "met" if value >= GOALS[name] else f"**below {GOALS[name]:g}** ({value:.3f})"


def main(argv: Sequence[str] | None = None, llm_factory: Callable[[], Any] | None = None) -> dict:
    args = parse_args(argv)
    steps = args.steps or (20 if args.quick else 200)
    repeats = args.repeats or (2 if args.quick else 5)
    agents = args.agents or (2 if args.quick else 8)
    tokens = args.react_tokens or (4 if args.quick else 32)
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError as exc:
        print(f"dynamic_graphs: needs langgraph and langgraph-checkpoint-sqlite ({exc})", file=sys.stderr)
        raise SystemExit(1) from None
    versions = _versions()
    contention = Contention()
    load0 = os.getloadavg()[0]
    print(
        f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, LangGraph {versions['langgraph']}, "
        f"langgraph-checkpoint-sqlite {versions['langgraph-checkpoint-sqlite']}, load average {load0:.2f}"
    )

    router = router_overhead(steps, repeats)
    ckpt = checkpoint_overhead(steps, repeats)
    print(
        f"\n| {steps}-step router loop, median of {repeats} | societas us/step | LangGraph us/step "
        "| LangGraph / societas | goal |"
    )
    print("|---|---|---|---|---|")
    for label, r, goal in (
        ("no checkpointer", router, "router"),
        ("SQLite checkpoint every step", ckpt, "checkpoint"),
    ):
        print(
            f"| {label} | {r['societas']['us_per_step']:.1f} (best {r['societas']['best_us_per_step']:.1f}) "
            f"| {r['langgraph']['us_per_step']:.1f} (best {r['langgraph']['best_us_per_step']:.1f}) "
            f"| {r['ratio']:.2f}x | >= {GOALS[goal]:g}: {_goal(r['ratio'], goal)} |"
        )
    print(
        f"\nCheckpoints written per run: societas {ckpt['societas']['checkpoints']}, "
        f"LangGraph {ckpt['langgraph']['checkpoints']}."
    )

    rx = None
    if not args.no_react:
        llm = llm_factory() if llm_factory is not None else load_llm("embedded")
        rx = react(llm, agents, tokens, args.max_tool_steps, args.langgraph_mode)
        s = rx["societas"]
        print(
            f"\n| {agents} ReAct agents, 2 tools, <= {tokens} tokens/turn, <= {args.max_tool_steps} turns, "
            "greedy | generated tokens | wall s | tokens/s | model turns | tool calls |"
        )
        print("|---|---|---|---|---|---|")
        calls = f"{s['generate_calls']} generate call" + ("" if s["generate_calls"] == 1 else "s")
        print(
            f"| societas, run_many, batched turns ({calls}) | {s['tokens']} "
            f"| {s['wall_s']:.1f} | {s['tok_s']:.1f} | {s['turns']} | {s['tool_calls']} |"
        )
        for r in rx["langgraph"]:
            how = (
                f"graph.batch, max_concurrency {agents}"
                if r["mode"] == "batch"
                else "invoke, one after another"
            )
            print(
                f"| LangGraph, {how}, one prompt per generate call | {r['tokens']} "
                f"| {r['wall_s']:.1f} "
                f"| {r['tok_s']:.1f} | {r['turns']} | {r['tool_calls']} |"
            )
        print(
            f"\nSpeed-up (societas tok/s / LangGraph {rx['best']['mode']} tok/s): {rx['speedup']:.2f}x "
            f"(goal >= {GOALS['react']:g}: {_goal(rx['speedup'], 'react')}); same first prompts "
            f"{rx['same_first_prompts']:.0%}, same prompts in all turns {rx['same_prompts']:.0%}, "
            f"same outputs {rx['same_outputs']:.0%}."
        )

    if args.profile:
        for checkpoint in (False, True):
            print(profile_societas(steps, 3 if checkpoint else 10, checkpoint, top=15))
            lengths = [max(1, steps // 4), max(1, steps // 2), steps, steps * 2]
            grow = scaling(lengths, checkpoint)
            shown = ", ".join(f"{n} steps: {us:.1f}" for n, us in grow.items())
            print(f"\nsocietas us/step by loop length ({'checkpointed' if checkpoint else 'plain'}): {shown}")

    others = contention.share()
    if others is not None:
        print(f"\nOther processes used {others:.0%} of the machine's CPU time during this run.")
    head: dict[str, Any] = {
        "benchmark": "dynamic_graphs",
        "quick": bool(args.quick),
        "steps": steps,
        "repeats": repeats,
        "router_societas_us_per_step": round(router["societas"]["us_per_step"], 2),
        "router_langgraph_us_per_step": round(router["langgraph"]["us_per_step"], 2),
        "router_overhead_ratio_vs_langgraph": round(router["ratio"], 2),
        "checkpoint_societas_us_per_step": round(ckpt["societas"]["us_per_step"], 2),
        "checkpoint_langgraph_us_per_step": round(ckpt["langgraph"]["us_per_step"], 2),
        "checkpoint_overhead_ratio_vs_langgraph": round(ckpt["ratio"], 3),
        "react": "skipped (--no-react)" if rx is None else "measured",
        "react_batched_speedup_vs_langgraph": None,
        "react_societas_tok_s": None,
        "react_langgraph_tok_s": None,
        "react_societas_tokens": None,
        "react_langgraph_tokens": None,
        "react_societas_tool_calls": None,
        "react_langgraph_tool_calls": None,
        "react_langgraph_mode": None,
        "react_agents": None,
        "react_tokens": None,
        "langgraph_version": versions["langgraph"],
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "others_cpu_share": None if others is None else round(others, 3),
    }
    if rx is not None:
        head.update(
            react_batched_speedup_vs_langgraph=round(rx["speedup"], 2),
            react_societas_tok_s=round(rx["societas"]["tok_s"], 2),
            react_langgraph_tok_s=round(rx["best"]["tok_s"], 2),
            react_societas_tokens=rx["societas"]["tokens"],
            react_langgraph_tokens=rx["best"]["tokens"],
            react_societas_tool_calls=rx["societas"]["tool_calls"],
            react_langgraph_tool_calls=rx["best"]["tool_calls"],
            react_langgraph_mode=rx["best"]["mode"],
            react_agents=agents,
            react_tokens=tokens,
        )
    print(json.dumps(head))
    return head


if __name__ == "__main__":
    main()

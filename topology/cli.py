"""Command line: ``python -m societas.topology run SPEC --task TEXT`` and ``python -m societas.topology show SPEC``.

Every expected failure ends with one line on standard error, ``error: ...``,
naming what failed, and no traceback: status 2 for bad input (a bad spec
naming its field, an unknown LLM, an unreadable file, an out-of-range number,
an output path that cannot be written, checked before anything runs) and
status 1 for a failure while running (an LLM server that gives no answer,
named by its URL, model and last HTTP status; a failing node). With
``--json`` the result is one JSON object on the last line of standard output.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.status import Status

from societas.agents import llm as llm_backends
from societas.agents.documents import DocumentError
from societas.agents.llm import LLM, LLMServerError, UnknownLLM

from .errors import SpecError
from .graph import Graph
from .render import graph_to_mermaid, render_graph_png, render_trace_png, trace_to_mermaid
from .runtime import NodeError, Runtime

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Run and inspect agent topologies.",
)


MAX_TIMEOUT_S = 86_400.0
"""The longest ``--timeout`` accepted (a day)."""


def _one_line(msg: str) -> str:
    """``msg`` as one line: line breaks and other control characters (a server's text may hold any) become spaces."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in msg).split())


def _fail(msg: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {_one_line(msg)}", err=True)
    raise typer.Exit(code)


def _int_option(option: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """A typer parser for an integer in ``[low, high]``: anything else exits 2 with one line, at parse time."""

    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            _fail(f"{option}: expected an integer, got {text!r}")
        if value < low or (high is not None and value > high):
            allowed = f"at least {low}" if high is None else f"between {low} and {high}"
            _fail(f"{option}: must be {allowed}, got {value}")
        return value

    return integer


def _timeout_option(text: str) -> float:
    """The typer parser of ``--timeout``: seconds above 0 and at most :data:`MAX_TIMEOUT_S`."""
    try:
        value = float(text)
    except ValueError:
        _fail(f"--timeout: expected a number of seconds, got {text!r}")
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        _fail(f"--timeout: must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, got {text}")
    return value


def _check_output(option: str, path: Path) -> None:
    """Exit 2 unless ``path`` can be written: not a directory, and in a writable directory.

    Missing parent directories are fine (the writers create them) as long as
    the nearest existing one is a writable directory. Checked before a run,
    so that a bad path does not cost the run its result.
    """
    where = f"{option} {path}"
    try:
        if path.is_dir():
            _fail(f"{where}: is a directory, expected a file path")
        if path.exists() and not os.access(path, os.W_OK):
            _fail(f"{where}: the file exists and is not writable")
        ancestor = path.absolute().parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            _fail(f"{where}: {ancestor} is not a directory")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            _fail(f"{where}: the directory {ancestor} is not writable")
    except OSError as exc:
        _fail(f"{where}: cannot be written: {exc.strerror or exc}")


def _load_graph(spec_path: Path) -> Graph:
    try:
        if not spec_path.exists():
            _fail(f"{spec_path}: no such file")
        if spec_path.is_dir():
            _fail(f"{spec_path}: is a directory, expected a .yaml/.yml/.json spec")
        return Graph.from_file(spec_path)
    except (SpecError, DocumentError) as exc:
        _fail(f"{spec_path}: {exc}")
    except OSError as exc:  # FileNotFoundError when the file went away since the check
        _fail(f"{spec_path}: cannot be read: {exc.strerror or exc}")


def _is_openai(uri: str) -> bool:
    return uri.strip().startswith("openai:")


def _users_of(graph: Graph, llm: str | None, exc: LLMServerError) -> str:
    """`` (the LLM of nodes a, b)``: the agent nodes whose LLM is the server that failed, when they can be told."""
    agents = [n for n in graph.nodes if graph.node(n).kind == "agent"]

    def served_by(uri: str) -> bool:
        scheme, _, rest = uri.strip().partition(":")
        url, _, model = rest.partition("#")
        return (
            scheme == "openai"
            and model == exc.model
            and f"{url.strip().rstrip('/')}/chat/completions" == exc.url
        )

    if llm is not None:
        nodes = agents if served_by(llm) else []
    else:
        nodes = [n for n in agents if served_by(graph.spec.llms.get(graph.node(n).llm, ""))]
    if not nodes:
        return ""
    return f" (the LLM of node{'s' if len(nodes) > 1 else ''} {', '.join(nodes)})"


def _openai_llms_with_timeout(
    graph: Graph, llm: str | None, timeout_s: float, built: dict[str, Any]
) -> tuple[LLM | None, dict[str, LLM]]:
    """The OpenAI-compatible LLMs of a run, built with ``timeout_s``: (the ``--llm`` one, spec name -> LLM).

    Each distinct URI is built once into ``built`` (URI -> client, for the
    caller to close), so that nodes sharing a server still share one client
    and its batching. Exits 2 when the run uses no OpenAI-compatible LLM,
    since ``--timeout`` would then do nothing.
    """

    def build(uri: str) -> LLM:
        if uri not in built:
            built[uri] = llm_backends.load_llm(uri, shared=False, timeout_s=timeout_s)
        return built[uri]

    if llm is not None:
        if not _is_openai(llm):
            _fail(f"--timeout: applies to OpenAI-compatible LLMs (openai:URL#MODEL) only; --llm is {llm!r}")
        return build(llm), {}
    names = sorted({graph.node(n).llm for n in graph.nodes if graph.node(n).kind == "agent"})
    uris = {name: graph.spec.llms[name] for name in names if name in graph.spec.llms}
    llms = {name: build(uri) for name, uri in uris.items() if _is_openai(uri)}
    if not llms:
        _fail(
            "--timeout: applies to OpenAI-compatible LLMs (openai:URL#MODEL) only, "
            f"and the agents of {graph.spec.name!r} use none ({', '.join(sorted(set(uris.values()))) or 'no LLM'})"
        )
    return None, llms


def _render(graph_or_trace: Any, path: Path, graph: Any = None) -> Path:
    if path.suffix.lower() in (".mmd", ".mermaid", ".md"):
        text = (
            trace_to_mermaid(graph_or_trace, graph) if graph is not None else graph_to_mermaid(graph_or_trace)
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        return path
    if graph is not None:
        return render_trace_png(graph_or_trace, path, graph=graph)
    return render_graph_png(graph_or_trace, path)


@app.command()
def show(
    spec: Path = typer.Argument(..., help="graph spec (.yaml/.yml/.json)"),
    render: Path | None = typer.Option(
        None, "--render", help="write a drawing: .png, or .mmd for Mermaid text"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Validate a spec and print its Mermaid diagram and metrics."""
    if render is not None:
        _check_output("--render", render)
    graph = _load_graph(spec)
    metrics = graph.metrics().to_dict()
    out: dict[str, Any] = {"name": graph.spec.name, "metrics": metrics, "final": graph.final}
    if render is not None:
        try:
            out["render"] = str(_render(graph, render))
        except OSError as exc:
            _fail(f"--render {render}: cannot be written: {exc.strerror or exc}", code=1)
    if as_json:
        out["mermaid"] = graph_to_mermaid(graph)
        typer.echo(json.dumps(out))
    else:
        typer.echo(graph_to_mermaid(graph))
        typer.echo(
            f"\n{graph.spec.name}: {metrics['nodes']} nodes, {metrics['edges']} edges, depth {metrics['depth']}, "
            f"density {metrics['density']:.3f}, final node {graph.final}"
        )


@app.command()
def run(
    spec: Path = typer.Argument(..., help="graph spec (.yaml/.yml/.json)"),
    task: str = typer.Option(..., "--task", help="the task every entry node receives"),
    llm: str | None = typer.Option(
        None, "--llm", help="LLM URI for every agent (embedded, hf:, gguf:, vllm:, openai:URL#MODEL)"
    ),
    trace: Path | None = typer.Option(None, "--trace", help="save the trace as JSONL"),
    render: Path | None = typer.Option(None, "--render", help="draw the trace: .png, or .mmd for Mermaid"),
    seed: int | None = typer.Option(None, "--seed", parser=_int_option("--seed", 0, 2**63 - 1)),
    max_tokens: int | None = typer.Option(
        None,
        "--max-tokens",
        help="token budget (overrides the spec)",
        parser=_int_option("--max-tokens", 1),
    ),
    max_calls: int | None = typer.Option(
        None, "--max-calls", help="call budget (overrides the spec)", parser=_int_option("--max-calls", 1)
    ),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        help="seconds one request to an OpenAI-compatible LLM may take in all, reading the answer "
        "included (each retry gets its own)",
        parser=_timeout_option,
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on the last line"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run a graph on a task."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not task.strip():
        _fail("--task: must not be empty")
    for option, path in (("--trace", trace), ("--render", render)):
        if path is not None:
            _check_output(option, path)
    graph = _load_graph(spec)
    console = Console(stderr=True, quiet=as_json)
    built: dict[str, Any] = {}  # clients made here for --timeout, closed at the end
    try:
        with Status("loading models…", console=console) as status:
            events = [0]

            def on_event(ev: Any) -> None:
                events[0] += 1
                status.update(f"step {ev.step}: {ev.sender} done ({events[0]} messages)")

            try:
                the_llm: LLM | str | None = llm
                llms: dict[str, LLM] = {}
                if timeout is not None:
                    override, llms = _openai_llms_with_timeout(graph, llm, timeout, built)
                    the_llm = override if override is not None else llm
                rt = Runtime(
                    graph,
                    llm=the_llm,
                    llms=llms,
                    seed=seed,
                    max_tokens=max_tokens,
                    max_calls=max_calls,
                    on_event=on_event,
                )
            except (UnknownLLM, SpecError, DocumentError, ValueError) as exc:
                _fail(str(exc))
            except OSError as exc:  # a model file that is missing or unreadable
                _fail(f"cannot load the LLM: {exc}")
            status.update("running…")
            try:
                result = rt.run(task)
            except LLMServerError as exc:
                _fail(f"LLM server gave no answer{_users_of(graph, llm, exc)}: {exc}", code=1)
            except NodeError as exc:
                _fail(str(exc), code=1)
            except (UnknownLLM, SpecError, DocumentError, ValueError) as exc:
                _fail(str(exc))
            except OSError as exc:
                _fail(f"the run failed: {exc}", code=1)
    finally:
        for client in built.values():
            client.close()
    try:
        if trace is not None:
            result.trace.save_jsonl(trace)
        rendered = str(_render(result.trace, render, graph=graph)) if render is not None else None
    except OSError as exc:
        _fail(f"cannot write {exc.filename or 'the output'}: {exc.strerror or exc}", code=1)
    totals = result.totals
    payload = {
        "graph": graph.spec.name,
        "task": task,
        "output": result.output,
        "stopped": result.stopped,
        "metrics": graph.metrics().to_dict(),
        "totals": {
            k: totals[k]
            for k in ("calls", "llm_batches", "prompt_tokens", "completion_tokens", "tokens", "wall_s")
        },
        "trace": str(trace) if trace else None,
        "render": rendered,
    }
    if as_json:
        typer.echo(json.dumps(payload))
        return
    for ev in result.trace:
        console.quiet = False
        typer.echo(f"── {ev.sender} (step {ev.step}, round {ev.round}, {ev.completion_tokens} tokens)")
        typer.echo(ev.output.strip())
    typer.echo("\n═══ final output ═══")
    typer.echo(result.output if result.output is not None else f"(none: run stopped by {result.stopped})")
    typer.echo(
        f"\n{totals['calls']} calls in {totals['llm_batches']} batched LLM calls, {totals['tokens']} tokens, "
        f"{totals['wall_s']:.1f} s" + (f"; stopped by {result.stopped}" if result.stopped else "")
    )
    if trace:
        typer.echo(f"trace: {trace}")
    if rendered:
        typer.echo(f"drawing: {rendered}")


def main() -> None:
    app(prog_name="python -m societas.topology")

"""Command line: ``run SPEC --task TEXT``, ``resume --checkpoint FILE --thread ID``, ``show SPEC`` and ``trace FILE``.

``run`` and ``resume`` write the run's trace (``--trace``, JSONL), a drawing
of it (``--render``, PNG or Mermaid) and a page that steps through it message
by message (``--html``, one self-contained HTML file); ``trace`` makes the
page or the drawing later, from a saved JSONL trace (``--spec`` adds the
graph's every node and edge).

``run --checkpoint FILE --thread ID`` saves the run after every superstep
(SQLite); ``resume`` continues a killed or interrupted thread from the file
alone (the spec is saved with it), ``--input`` answering an interrupt. When
a run stops for a person's answer and standard input is a terminal, the
command asks and goes on; otherwise it prints how to resume.

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

from .checkpoint import CheckpointError, MemoryCheckpointer, SqliteCheckpointer
from .errors import SpecError
from .graph import Graph
from .render import graph_to_mermaid, render_graph_png, render_trace_png, trace_to_mermaid
from .runtime import NodeError, Runtime
from .spec import GraphSpec
from .trace import Trace
from .trace_html import write_trace_html

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


def _llm_options(
    graph: Graph, llm: str | None, timeout: float | None, built: dict[str, Any]
) -> dict[str, Any]:
    the_llm: LLM | str | None = llm
    llms: dict[str, LLM] = {}
    if timeout is not None:
        override, llms = _openai_llms_with_timeout(graph, llm, timeout, built)
        the_llm = override if override is not None else llm
    return {"llm": the_llm, "llms": llms}


def _ask(payload: Any) -> str:
    """Ask the person at the terminal to answer an interrupt."""
    if isinstance(payload, dict) and "tool" in payload:
        question = f"approve the call {payload['tool']}({json.dumps(payload.get('arguments', {}))})? [yes/no]"
    elif isinstance(payload, dict) and "question" in payload:
        question = str(payload["question"])
    else:
        question = json.dumps(payload)
    return typer.prompt(question, err=True)  # on stderr: with --json, stdout holds only the result


def _execute(
    graph: Graph,
    *,
    llm: str | None,
    timeout: float | None,
    seed: int | None,
    max_tokens: int | None,
    max_calls: int | None,
    checkpoint: Path | None,
    thread: str | None,
    console: Console,
    start: Callable[[Runtime], Any],
) -> Any:
    """Build the Runtime, run ``start(rt)``, and answer interrupts at a terminal; one-line errors."""
    built: dict[str, Any] = {}  # clients made here for --timeout, closed at the end
    cp: Any = None
    try:
        if checkpoint is not None:
            try:
                cp = SqliteCheckpointer(checkpoint)
            except CheckpointError as exc:
                _fail(f"--checkpoint {checkpoint}: {exc}")
        with Status("loading models…", console=console) as status:
            events = [0]

            def on_event(ev: Any) -> None:
                events[0] += 1
                status.update(f"step {ev.step}: {ev.sender} done ({events[0]} messages)")

            try:
                if cp is None:
                    cp = MemoryCheckpointer()  # interrupts answered at the terminal need the saved state
                rt = Runtime(
                    graph,
                    **_llm_options(graph, llm, timeout, built),
                    seed=seed,
                    max_tokens=max_tokens,
                    max_calls=max_calls,
                    on_event=on_event,
                    checkpointer=cp,
                )
            except (UnknownLLM, SpecError, DocumentError, ValueError) as exc:
                _fail(str(exc))
            except OSError as exc:  # a model file that is missing or unreadable
                _fail(f"cannot load the LLM: {exc}")
            status.update("running…")
            try:
                result = start(rt)
                while result.interrupted and os.isatty(0) and result.thread is not None:
                    status.stop()
                    answer = _ask(result.interrupt)
                    status.start()
                    result = rt.resume(result.thread, answer)
            except LLMServerError as exc:
                _fail(f"LLM server gave no answer{_users_of(graph, llm, exc)}: {exc}", code=1)
            except NodeError as exc:
                _fail(str(exc), code=1)
            except CheckpointError as exc:
                _fail(
                    f"--checkpoint {checkpoint}: {exc}",
                    code=1 if "locked" in type(exc).__name__.lower() else 2,
                )
            except (UnknownLLM, SpecError, DocumentError, ValueError) as exc:
                _fail(str(exc))
            except OSError as exc:
                _fail(f"the run failed: {exc}", code=1)
    finally:
        for client in built.values():
            client.close()
        if cp is not None:
            cp.close()
    return result


def _report(
    graph: Graph,
    task: str,
    result: Any,
    *,
    trace: Path | None,
    render: Path | None,
    html: Path | None,
    as_json: bool,
    console: Console,
    checkpoint: Path | None,
) -> None:
    try:
        if trace is not None:
            result.trace.save_jsonl(trace)
        rendered = str(_render(result.trace, render, graph=graph)) if render is not None else None
        page = str(write_trace_html(result.trace, html, graph)) if html is not None else None
    except OSError as exc:
        _fail(f"cannot write {exc.filename or 'the output'}: {exc.strerror or exc}", code=1)
    totals = result.totals
    resume_hint = None
    if result.interrupted:
        where = f"--checkpoint {checkpoint} --thread {result.thread}" if checkpoint is not None else None
        resume_hint = (
            f"societas resume {where} --input ANSWER" if where else "run with --checkpoint to resume later"
        )
    payload = {
        "graph": graph.spec.name,
        "task": task,
        "output": result.output,
        "stopped": result.stopped,
        "ended_by": result.ended_by,
        "interrupt": result.interrupt,
        "thread": result.thread if checkpoint is not None else None,
        "resume": resume_hint,
        "metrics": graph.metrics().to_dict(),
        "totals": {
            k: totals[k]
            for k in ("calls", "llm_batches", "prompt_tokens", "completion_tokens", "tokens", "wall_s")
        },
        "trace": str(trace) if trace else None,
        "render": rendered,
        "html": page,
    }
    if as_json:
        typer.echo(json.dumps(payload, default=str))
        return
    for ev in result.trace:
        console.quiet = False
        if ev.kind == "router":
            typer.echo(f"── {ev.sender} routes to {', '.join(ev.receivers) or 'END'} (step {ev.step})")
            continue
        if ev.kind == "tool_call":
            typer.echo(f"── {ev.sender} called {ev.meta.get('tool')}({json.dumps(ev.meta.get('arguments'))})")
            typer.echo(ev.output.strip())
            continue
        typer.echo(f"── {ev.sender} (step {ev.step}, round {ev.round}, {ev.completion_tokens} tokens)")
        typer.echo(ev.output.strip())
    if result.interrupted:
        typer.echo("\n═══ waiting for an answer ═══")
        typer.echo(json.dumps(result.interrupt, default=str))
        typer.echo(f"resume: {resume_hint}")
    else:
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
    if page:
        typer.echo(f"page: {page}")


_HTML_HELP = "write a page that steps through the run message by message (one self-contained HTML file)"
_LLM_HELP = "LLM URI for every agent (embedded, hf:, gguf:, vllm:, openai:URL#MODEL)"
_TIMEOUT_HELP = (
    "seconds one request to an OpenAI-compatible LLM may take in all, reading the answer "
    "included (each retry gets its own)"
)


@app.command()
def run(
    spec: Path = typer.Argument(..., help="graph spec (.yaml/.yml/.json)"),
    task: str = typer.Option(..., "--task", help="the task every entry node receives"),
    llm: str | None = typer.Option(None, "--llm", help=_LLM_HELP),
    trace: Path | None = typer.Option(None, "--trace", help="save the trace as JSONL"),
    render: Path | None = typer.Option(None, "--render", help="draw the trace: .png, or .mmd for Mermaid"),
    html: Path | None = typer.Option(None, "--html", help=_HTML_HELP),
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
    timeout: float | None = typer.Option(None, "--timeout", help=_TIMEOUT_HELP, parser=_timeout_option),
    checkpoint: Path | None = typer.Option(
        None, "--checkpoint", help="SQLite file that saves the run after every step (with --thread)"
    ),
    thread: str | None = typer.Option(
        None, "--thread", help="the id the run is saved under (with --checkpoint)"
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
    if (checkpoint is None) != (thread is None):
        _fail("--checkpoint and --thread go together: the file to save in and the id to save under")
    if thread is not None and not thread.strip():
        _fail("--thread: must not be empty")
    for option, path in (
        ("--trace", trace),
        ("--render", render),
        ("--html", html),
        ("--checkpoint", checkpoint),
    ):
        if path is not None:
            _check_output(option, path)
    graph = _load_graph(spec)
    console = Console(stderr=True, quiet=as_json)
    run_thread = thread if thread is not None else "cli"
    result = _execute(
        graph,
        llm=llm,
        timeout=timeout,
        seed=seed,
        max_tokens=max_tokens,
        max_calls=max_calls,
        checkpoint=checkpoint,
        thread=thread,
        console=console,
        start=lambda rt: rt.run(task, thread=run_thread),
    )
    _report(
        graph,
        task,
        result,
        trace=trace,
        render=render,
        html=html,
        as_json=as_json,
        console=console,
        checkpoint=checkpoint,
    )


@app.command()
def resume(
    checkpoint: Path = typer.Option(..., "--checkpoint", help="the SQLite file the run was saved in"),
    thread: str = typer.Option(..., "--thread", help="the id the run was saved under"),
    answer: str | None = typer.Option(None, "--input", help="the answer to the interrupt the run waits on"),
    llm: str | None = typer.Option(None, "--llm", help=_LLM_HELP),
    timeout: float | None = typer.Option(None, "--timeout", help=_TIMEOUT_HELP, parser=_timeout_option),
    trace: Path | None = typer.Option(None, "--trace", help="save the whole trace as JSONL"),
    render: Path | None = typer.Option(None, "--render", help="draw the trace: .png, or .mmd for Mermaid"),
    html: Path | None = typer.Option(None, "--html", help=_HTML_HELP),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on the last line"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Continue a saved run: after a crash, or with the answer to an interrupt."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not checkpoint.is_file():
        _fail(f"--checkpoint {checkpoint}: no such file")
    for option, path in (("--trace", trace), ("--render", render), ("--html", html)):
        if path is not None:
            _check_output(option, path)
    try:
        with SqliteCheckpointer(checkpoint) as cp:
            ck = cp.latest(thread)
            # The spec is saved with a thread's first checkpoint (and with a fork's).
            spec_data = next(
                (c.meta.get("spec") for c in cp.list(thread, light=True) if "spec" in c.meta), None
            )
    except CheckpointError as exc:
        _fail(f"--checkpoint {checkpoint}: {exc}")
    if not isinstance(spec_data, dict):
        _fail(f"--checkpoint {checkpoint}: thread {thread!r} was saved without its graph spec")
    try:
        graph = Graph(GraphSpec.from_data(spec_data, source=f"{checkpoint} (thread {thread})"))
    except SpecError as exc:
        _fail(f"--checkpoint {checkpoint}: the saved spec is not valid: {exc}")
    console = Console(stderr=True, quiet=as_json)
    task = str(ck.state.get("task", {}).get("task", ""))
    result = _execute(
        graph,
        llm=llm,
        timeout=timeout,
        seed=None,
        max_tokens=None,
        max_calls=None,
        checkpoint=checkpoint,
        thread=thread,
        console=console,
        start=lambda rt: rt.resume(thread, answer),
    )
    _report(
        graph,
        task,
        result,
        trace=trace,
        render=render,
        html=html,
        as_json=as_json,
        console=console,
        checkpoint=checkpoint,
    )


@app.command("trace")
def trace_command(
    file: Path = typer.Argument(..., help="a trace saved with --trace (JSONL)"),
    html: Path | None = typer.Option(
        None, "--html", help="where the page goes (default: the trace's path with .html, unless --render)"
    ),
    render: Path | None = typer.Option(None, "--render", help="draw the trace: .png, or .mmd for Mermaid"),
    spec: Path | None = typer.Option(
        None, "--spec", help="the graph spec of the run: its every node and edge is drawn"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on the last line"),
) -> None:
    """Make the page that steps through a saved run (--html), or a drawing of it (--render)."""
    if not file.is_file():
        _fail(f"{file}: no such file" if not file.exists() else f"{file}: is not a file")
    if html is None and render is None:
        html = file.with_suffix(".html")
    for option, path in (("--html", html), ("--render", render)):
        if path is not None:
            _check_output(option, path)
    graph = _load_graph(spec) if spec is not None else None
    try:
        saved = Trace.load_jsonl(file)
    except (ValueError, TypeError) as exc:  # TypeError: a line holding JSON that is no object
        _fail(f"{file}: not a trace: {exc}" if isinstance(exc, TypeError) else str(exc))
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{file}: cannot be read: {getattr(exc, 'strerror', None) or exc}")
    try:
        page = str(write_trace_html(saved, html, graph)) if html is not None else None
        rendered = None
        if render is not None:
            if graph is not None:
                rendered = str(_render(saved, render, graph=graph))
            elif render.suffix.lower() in (".mmd", ".mermaid", ".md"):
                render.parent.mkdir(parents=True, exist_ok=True)
                render.write_text(trace_to_mermaid(saved) + "\n")
                rendered = str(render)
            else:
                rendered = str(render_trace_png(saved, render))
    except OSError as exc:
        _fail(f"cannot write {exc.filename or 'the output'}: {exc.strerror or exc}", code=1)
    totals = saved.totals()
    payload = {
        "trace": str(file),
        "events": len(saved),
        "calls": totals.calls,
        "llm_batches": totals.llm_batches,
        "tokens": totals.tokens,
        "html": page,
        "render": rendered,
    }
    if as_json:
        typer.echo(json.dumps(payload))
        return
    typer.echo(
        f"{file}: {len(saved)} events, {totals.calls} calls in {totals.llm_batches} batched LLM calls, "
        f"{totals.tokens} tokens"
    )
    if page:
        typer.echo(f"page: {page}")
    if rendered:
        typer.echo(f"drawing: {rendered}")


def main() -> None:
    app(prog_name="python -m societas.topology")

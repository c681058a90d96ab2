"""Command line: ``python -m societas.topology run SPEC --task TEXT`` and ``python -m societas.topology show SPEC``.

A bad spec exits with status 2 and one short line naming the field; with
``--json`` the result is one JSON object on the last line of standard output.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.status import Status

from societas.agents.llm import UnknownLLM

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


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _load_graph(spec_path: Path):
    if not spec_path.exists():
        _fail(f"{spec_path}: no such file")
    if spec_path.is_dir():
        _fail(f"{spec_path}: is a directory, expected a .yaml/.yml/.json spec")
    try:
        return Graph.from_file(spec_path)
    except SpecError as exc:
        _fail(f"{spec_path}: {exc}")


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
    graph = _load_graph(spec)
    metrics = graph.metrics().to_dict()
    out: dict[str, Any] = {"name": graph.spec.name, "metrics": metrics, "final": graph.final}
    if render is not None:
        out["render"] = str(_render(graph, render))
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
    seed: int | None = typer.Option(None, "--seed"),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="token budget (overrides the spec)"),
    max_calls: int | None = typer.Option(None, "--max-calls", help="call budget (overrides the spec)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on the last line"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run a graph on a task."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    graph = _load_graph(spec)
    if not task.strip():
        _fail("--task: must not be empty")
    console = Console(stderr=True, quiet=as_json)
    try:
        with Status("loading models…", console=console) as status:
            events = [0]

            def on_event(ev: Any) -> None:
                events[0] += 1
                status.update(f"step {ev.step}: {ev.sender} done ({events[0]} messages)")

            rt = Runtime(
                graph, llm=llm, seed=seed, max_tokens=max_tokens, max_calls=max_calls, on_event=on_event
            )
            status.update("running…")
            result = rt.run(task)
    except (UnknownLLM, FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    except NodeError as exc:
        _fail(str(exc), code=1)
    if trace is not None:
        result.trace.save_jsonl(trace)
    rendered = str(_render(result.trace, render, graph=graph)) if render is not None else None
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

"""The search parses programs in two threads at once (LLM children on the side); CPython 3.11
before 3.11.8 breaks ``ast.parse`` then, when a garbage collection runs Python finalizers in the
middle of a parse ("AST constructor recursion depth mismatch"). Every parse in the evolve package
goes through one lock, so the race cannot happen inside a search."""

from __future__ import annotations

import gc
import random
import threading
from pathlib import Path

from societas.evolve.blocks import BlockLibrary, mutate_blocks
from societas.evolve.mutation import line_sites
from societas.evolve.program import parse_python
from societas.evolve.task import load_task

TASK = load_task("cfr")
LIBRARY = BlockLibrary.load(TASK.blocks_path)
VAD = (Path(TASK.directory) / "seeds" / "vad_cfr.py").read_text()


class _Garbage:
    """A cycle with a Python finalizer: collecting it runs Python code, where threads switch."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(100))


def _hammer(work, rounds: int, errors: list[BaseException]) -> None:
    try:
        for _ in range(rounds):
            work()
            [_Garbage() for _ in range(20)]
    except SystemError as exc:
        errors.append(exc)


def test_the_search_parses_from_several_threads_without_the_cpython_race():
    rng = random.Random(0)
    jobs = [
        lambda: parse_python(VAD),
        lambda: line_sites(VAD),
        lambda: mutate_blocks(TASK.initial_program, random.Random(rng.random()), LIBRARY),
        lambda: parse_python(TASK.initial_program),
    ]
    errors: list[BaseException] = []
    threshold = gc.get_threshold()
    gc.set_threshold(50, 2, 2)  # collect often, as a torch-heavy process does
    try:
        threads = [threading.Thread(target=_hammer, args=(job, 150, errors)) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.set_threshold(*threshold)
    assert errors == []

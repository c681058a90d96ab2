"""Where evaluations run: a local pool (default) or a Ray cluster.

Both take the same picklable jobs (:class:`societas.evolve.evaluator.EvalJob`) and the
same top-level function, and yield ``(index, result)`` as jobs finish; the
controller commits each result as it arrives but applies them to the search
state in iteration order, so the executor never changes what a run finds.

* ``process`` — a thread pool of ``workers`` threads. Each evaluation already
  runs in its own sandboxed subprocess, so threads only wait on children and
  the GIL is no bottleneck.
* ``ray`` — one Ray task per evaluation (``ray.remote``), imported only when
  chosen; joins the cluster at ``address`` (``--ray-address``, or
  ``RAY_ADDRESS``) or starts a local instance with ``workers`` CPUs
  (:func:`societas.marl.cluster.connect_ray`). Every node needs this package
  and, for bubblewrap containment, ``bwrap``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Protocol

from societas.marl.cluster import connect_ray

logger = logging.getLogger(__name__)

__all__ = ["Executor", "ExecutorError", "ProcessExecutor", "RayExecutor", "make_executor"]


class ExecutorError(RuntimeError):
    """An executor that cannot be started (e.g. Ray missing)."""


class Executor(Protocol):
    name: str

    def map_unordered(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, fn(jobs[index]))`` (or the exception it raised) as each finishes."""
        ...

    def close(self) -> None: ...


class ProcessExecutor:
    name = "process"

    def __init__(self, workers: int = 4) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evolve-eval")

    def map_unordered(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        futures = {self._pool.submit(fn, job): index for index, job in enumerate(jobs)}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], (error if error is not None else future.result())

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    name = "ray"

    def __init__(self, workers: int = 4, address: str | None = None) -> None:
        # A local Ray instance started here is sized to ``workers``; close() shuts it down (so the
        # next executor starts one of its own size) or disconnects from the cluster it joined.
        try:
            ray, self._owns = connect_ray(
                "--executor ray", address=address, local_cpus=workers, log_to_driver=False
            )
        except ImportError as exc:
            raise ExecutorError(str(exc)) from None
        except ConnectionError as exc:
            raise ExecutorError(str(exc)) from None
        self._ray = ray
        self.workers = workers
        self._remotes: dict[Callable, Any] = {}

    def map_unordered(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        if fn not in self._remotes:
            self._remotes[fn] = ray.remote(num_cpus=1)(fn)
        remote = self._remotes[fn]
        refs = [remote.remote(job) for job in jobs]
        index = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    yield index[ref], ray.get(ref)
                except Exception as exc:  # a failed task becomes a failed evaluation
                    yield index[ref], exc

    def close(self) -> None:
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns = False


def make_executor(kind: str, workers: int, address: str | None = None) -> Executor:
    if kind == "process":
        return ProcessExecutor(workers)
    if kind == "ray":
        return RayExecutor(workers, address)
    raise ExecutorError(f"unknown executor {kind!r}; choose 'process' or 'ray'")

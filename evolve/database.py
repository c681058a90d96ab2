"""The program database: MAP-Elites islands in memory, every program in SQLite.

Search state (after AlphaEvolve, Novikov et al. 2025, and OpenEvolve):

* **Islands** (the island model of FunSearch/AlphaEvolve): the population is
  split into ``num_islands`` sub-populations that evolve apart; iteration
  ``t`` works on island ``t mod num_islands``. Every ``migration_interval``
  iterations each island sends its best ``ceil(migration_rate * size)``
  programs to the next island on a ring.
* **MAP-Elites** (Mouret & Clune, "Illuminating search spaces by mapping
  elites", 2015) per island: a grid over feature dimensions keeps, in each
  cell, the fittest program whose features fall there. The default features
  are ``complexity`` (code length in characters) and ``diversity`` (the mean
  normalised token-level difference, ``1 - difflib ratio``, to the island's
  ``diversity_reference_size`` best programs); any metric the evaluator
  reports may serve as a dimension. Each dimension is cut into
  ``feature_bins`` equal bins over ``feature_ranges[dim]`` (defaults:
  ``[L/2, 3L/2]`` for complexity with ``L`` the seed's length, ``[0, 0.25]``
  for diversity, ``[0, 1]`` for metrics); values outside fall in the edge bins.
* **Elite archive**: the ``archive_size`` fittest programs over all islands.
* **Parent selection** mixes exploitation (a random archive member, with
  probability ``exploitation_ratio``), exploration (a random member of the
  current island, ``exploration_ratio``) and a random pick among all
  successful programs (the remainder). **Inspirations** for the prompt are
  the island's best programs and programs from other cells of its grid.

Persistence and resumption: :class:`ProgramStore` keeps every program (also
failed ones) in an SQLite file in WAL mode and commits each one in its own
transaction the moment its evaluation returns, so a crash (even SIGKILL)
loses at most evaluations in flight. The in-memory :class:`Population` is a
deterministic function of the successful programs taken in iteration order,
so reopening a run replays them and arrives at the same state; selection
randomness comes from generators derived from ``(seed, iteration)`` (see
:func:`derive_rng`), so there is no hidden RNG state to lose. The iteration
counter is the set of committed iterations itself.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import math
import random
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import DatabaseConfig
from .program import Program

logger = logging.getLogger(__name__)

__all__ = ["Island", "Population", "ProgramStore", "Selection", "code_difference", "derive_rng"]

# Children differ from their elites by a few tokens: a quarter of the tokens is already far.
_DEFAULT_RANGES = {"diversity": (0.0, 0.25)}
_TOKEN = re.compile(r"\w+|[^\w\s]")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS programs (
    id TEXT PRIMARY KEY,
    iteration INTEGER NOT NULL UNIQUE,
    status TEXT NOT NULL,
    fitness REAL,
    island INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def derive_rng(seed: int, *labels: Any) -> random.Random:
    """A generator seeded from ``seed`` and labels (e.g. the iteration): reproducible and stateless to store."""
    text = ":".join(str(part) for part in (seed, *labels))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def code_difference(a: str, b: str) -> float:
    """Normalised token-level difference in [0, 1]: ``1 - difflib.SequenceMatcher.ratio()``."""
    if a == b:
        return 0.0
    matcher = difflib.SequenceMatcher(None, _TOKEN.findall(a), _TOKEN.findall(b), autojunk=False)
    return 1.0 - matcher.ratio()


class ProgramStore:
    """Every program of a run in SQLite (WAL): one committed transaction per program."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # WAL with NORMAL already survives a killed process; FULL also survives a power loss.
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def add(self, program: Program) -> None:
        """Commit ``program``; an iteration can hold only one program."""
        data = json.dumps(program.to_dict(), sort_keys=True)
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.execute(
                    "INSERT INTO programs (id, iteration, status, fitness, island, data) VALUES (?, ?, ?, ?, ?, ?)",
                    (program.id, program.iteration, program.status, program.fitness, program.island, data),
                )
                self._conn.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                self._conn.execute("ROLLBACK")
                raise ValueError(
                    f"iteration {program.iteration} (program {program.id}) is already stored: {exc}"
                ) from None

    def programs(self) -> list[Program]:
        """All stored programs in iteration order."""
        with self._lock:
            rows = self._conn.execute("SELECT data FROM programs ORDER BY iteration").fetchall()
        return [Program.from_dict(json.loads(row[0])) for row in rows]

    def iterations(self) -> set[int]:
        with self._lock:
            return {row[0] for row in self._conn.execute("SELECT iteration FROM programs")}

    def get(self, program_id: str) -> Program | None:
        with self._lock:
            row = self._conn.execute("SELECT data FROM programs WHERE id = ?", (program_id,)).fetchone()
        return Program.from_dict(json.loads(row[0])) if row else None

    def count(self, status: str | None = None) -> int:
        with self._lock:
            if status is None:
                return self._conn.execute("SELECT COUNT(*) FROM programs").fetchone()[0]
            return self._conn.execute("SELECT COUNT(*) FROM programs WHERE status = ?", (status,)).fetchone()[
                0
            ]

    def set_meta(self, key: str, value: Any) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def get_meta(self, key: str, default: Any = None) -> Any:
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default


@dataclass
class Island:
    """One sub-population: its members (in arrival order) and its MAP-Elites grid (cell -> program id)."""

    index: int
    members: list[str] = field(default_factory=list)
    grid: dict[tuple[int, ...], str] = field(default_factory=dict)
    cells: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Selection:
    """A parent, the programs shown with it in the prompt, and how the parent was chosen."""

    parent: Program
    inspirations: list[Program]
    island: int
    strategy: str


class Population:
    """MAP-Elites islands over the successful programs, rebuilt deterministically from them."""

    def __init__(self, config: DatabaseConfig) -> None:
        self.config = config
        self.programs: dict[str, Program] = {}
        self.islands = [Island(i) for i in range(config.num_islands)]
        self.archive: list[str] = []
        self.migrations = 0
        self._ranges: dict[str, tuple[float, float]] = dict(config.feature_ranges)
        self._score_span = [math.inf, -math.inf]  # the lowest and highest fitness placed so far
        self._warned: set[str] = set()

    # ----------------------------------------------------------------- adding

    def add(self, program: Program) -> None:
        """Place a successful program (the seed, iteration 0, goes to every island) and migrate when due."""
        if not program.ok:
            return
        if program.iteration == 0 and "complexity" not in self._ranges:
            self._ranges["complexity"] = (0.5 * len(program.code), 1.5 * len(program.code) + 1.0)
        self.programs[program.id] = program
        targets = range(len(self.islands)) if program.iteration == 0 else [program.island % len(self.islands)]
        for index in targets:
            self._place(program, self.islands[index])
        self._update_archive(program)
        interval = self.config.migration_interval
        if program.iteration > 0 and program.iteration % interval == 0:
            self.migrate()

    def _place(self, program: Program, island: Island) -> None:
        if program.id in island.cells:
            return
        cell = self.features_to_cell(self.features(program, island))
        island.members.append(program.id)
        island.cells[program.id] = cell
        occupant = island.grid.get(cell)
        if occupant is None or self._key(program) > self._key(self.programs[occupant]):
            island.grid[cell] = program.id
        self._enforce_capacity(island)

    def _enforce_capacity(self, island: Island) -> None:
        capacity = max(1, self.config.population_size // len(self.islands))
        while len(island.members) > capacity:
            protected = set(island.grid.values()) | set(self.archive) | {self.best_id(island)}
            candidates = [pid for pid in island.members if pid not in protected]
            if not candidates:
                return
            worst = min(candidates, key=lambda pid: self._key(self.programs[pid]))
            island.members.remove(worst)
            del island.cells[worst]

    def _update_archive(self, program: Program) -> None:
        self.archive.append(program.id)
        self.archive.sort(key=lambda pid: self._key(self.programs[pid]), reverse=True)
        del self.archive[self.config.archive_size :]

    def migrate(self) -> None:
        """Ring migration: island ``i`` sends its best ``ceil(rate * size)`` programs to island ``i+1``."""
        n = len(self.islands)
        if n < 2 or self.config.migration_rate <= 0:
            return
        outgoing = []
        for island in self.islands:
            count = math.ceil(self.config.migration_rate * len(island.members))
            outgoing.append(self.ranked(island)[:count])
        for index, migrants in enumerate(outgoing):
            target = self.islands[(index + 1) % n]
            for program in migrants:
                self._place(program, target)
        self.migrations += 1
        logger.debug("migration %d done", self.migrations)

    # --------------------------------------------------------------- features

    def features(self, program: Program, island: Island) -> dict[str, float]:
        values: dict[str, float] = {}
        for dim in self.config.feature_dimensions:
            if dim == "complexity":
                values[dim] = float(len(program.code))
            elif dim == "diversity":
                refs = [
                    p
                    for p in self.ranked(island)[: self.config.diversity_reference_size]
                    if p.id != program.id
                ]
                values[dim] = (
                    sum(code_difference(program.code, r.code) for r in refs) / len(refs) if refs else 0.0
                )
            elif dim == "score":
                # OpenEvolve's built-in "score" dimension: the program's fitness.
                values[dim] = float(program.fitness) if program.fitness is not None else -math.inf
            elif dim in program.metrics:
                values[dim] = float(program.metrics[dim])
            else:
                if dim not in self._warned:
                    logger.warning("feature dimension %r is not among the metrics; using its lowest bin", dim)
                    self._warned.add(dim)
                values[dim] = -math.inf
        return values

    def features_to_cell(self, values: dict[str, float]) -> tuple[int, ...]:
        cell = []
        for dim in self.config.feature_dimensions:
            bins = self.config.bins(dim)
            value = values[dim]
            if dim == "score" and dim not in self._ranges:
                # Fitness has no natural range (exploitability is negative, a speed-up unbounded): the
                # range is the span of the scores seen so far, this one included (OpenEvolve's min-max
                # scaling), so the cells follow the search's progress.
                seen = self._score_span
                if math.isfinite(value):
                    seen[0], seen[1] = min(seen[0], value), max(seen[1], value)
                low, high = seen if seen[1] > seen[0] else (seen[0], seen[0] + 1.0)
            else:
                low, high = self._ranges.get(dim, _DEFAULT_RANGES.get(dim, (0.0, 1.0)))
            position = 0 if not math.isfinite(value) else int((value - low) / (high - low) * bins)
            cell.append(min(max(position, 0), bins - 1))
        return tuple(cell)

    # -------------------------------------------------------------- selection

    @staticmethod
    def _key(program: Program) -> tuple[bool, float, int]:
        # Fully evaluated programs before those the cascade stopped early (a score from the first stages
        # only is not comparable with a full one), then higher fitness; on ties the older program wins.
        return (
            program.complete,
            program.fitness if program.fitness is not None else -math.inf,
            -program.iteration,
        )

    def rank_key(self, program: Program) -> tuple[bool, float, int]:
        """The order of programs: complete ones first, then by fitness, then the older first."""
        return self._key(program)

    def ranked(self, island: Island) -> list[Program]:
        return sorted((self.programs[pid] for pid in island.members), key=self._key, reverse=True)

    def best_id(self, island: Island | None = None) -> str | None:
        pool = island.members if island is not None else list(self.programs)
        if not pool:
            return None
        return max(pool, key=lambda pid: self._key(self.programs[pid]))

    def best(self) -> Program | None:
        best = self.best_id()
        return self.programs[best] if best else None

    def sample(
        self,
        island_index: int,
        rng: random.Random,
        num_top: int = 3,
        num_diverse: int = 2,
        *,
        without_error: bool = False,
    ) -> Selection:
        """Choose a parent for island ``island_index`` and the inspirations to show with it.

        ``without_error``: the parent is drawn among the programs of the chosen
        pool whose evaluator reported no ``error`` entry, where the pool has
        any (for operators that cannot read the error and repair what it names).
        """
        if not self.programs:
            raise RuntimeError("the population is empty: evaluate the seed program first")
        island = self.islands[island_index % len(self.islands)]
        r = rng.random()
        exploit, explore = self.config.exploitation_ratio, self.config.exploration_ratio
        if r < exploit and self.archive:
            strategy, pool = "exploitation", list(self.archive)
        elif r < exploit + explore and island.members:
            strategy, pool = "exploration", list(island.members)
        else:
            strategy, pool = "random", sorted(self.programs, key=lambda pid: self.programs[pid].iteration)
        if without_error:
            pool = [pid for pid in pool if "error" not in self.programs[pid].artifacts] or pool
        parent = self.programs[rng.choice(pool)]

        chosen = {parent.id}
        inspirations: list[Program] = []
        for program in self.ranked(island):
            if len(inspirations) >= num_top:
                break
            if program.id not in chosen:
                inspirations.append(program)
                chosen.add(program.id)
        parent_cell = island.cells.get(parent.id)
        others = [
            pid for cell, pid in sorted(island.grid.items()) if cell != parent_cell and pid not in chosen
        ]
        for pid in rng.sample(others, min(num_diverse, len(others))):
            inspirations.append(self.programs[pid])
        return Selection(parent, inspirations, island.index, strategy)

    # ------------------------------------------------------------- statistics

    def island_stats(self) -> list[dict[str, Any]]:
        stats = []
        for island in self.islands:
            # Members are successful programs (add() places only those), so none is filtered out here.
            fits = [f for f in (self.programs[pid].fitness for pid in island.members) if f is not None]
            best = self.best_id(island)
            stats.append(
                {
                    "island": island.index,
                    "members": len(island.members),
                    "cells": len(island.grid),
                    "best_fitness": self.programs[best].fitness if best else None,
                    "best_id": best,
                    "mean_fitness": sum(fits) / len(fits) if fits else None,
                }
            )
        return stats

"""Durable run state: a checkpoint after every superstep, keyed by a thread id.

The Runtime saves a :class:`Checkpoint` (the run's state as JSON-compatible
data, a fingerprint of the graph it ran, free-form meta) after each
superstep under a *thread* id, so that a killed run resumes from its last
complete step. Two implementations share the :class:`Checkpointer` protocol:

* :class:`MemoryCheckpointer` keeps checkpoints in the process (tests, and
  runs that only need to pause and resume while the process lives);
* :class:`SqliteCheckpointer` keeps them in one SQLite file (standard
  library ``sqlite3``): every put is one transaction, so a process killed at
  any moment (``kill -9`` included) leaves the previous checkpoints intact
  and no half-written one; several threads and processes may share the file.

State round-trips through JSON: what a get returns equals what was put,
except that tuples come back as lists. State that JSON cannot hold (a set,
a non-string dict key, an object) is refused with a ``TypeError`` naming
the path of the bad value before anything is written.
"""

from __future__ import annotations

import builtins
import json
import math
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "SCHEMA_VERSION",
    "Checkpoint",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointLocked",
    "Checkpointer",
    "GraphMismatch",
    "MemoryCheckpointer",
    "SqliteCheckpointer",
    "StepNotFound",
    "ThreadNotFound",
    "state_to_json",
]

SCHEMA_VERSION = 1
"""The layout of :class:`SqliteCheckpointer` files this version reads and writes."""

_APPLICATION_ID = 0x536F6331  # "Soc1", in the SQLite header: marks a societas checkpoint file
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SHOWN_THREADS = 10


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


class CheckpointError(RuntimeError):
    """A checkpoint could not be saved or loaded."""


def _list_text(items: Sequence[Any], total: int) -> str:
    shown = ", ".join(str(i) for i in items)
    return shown + (f" ... ({total} in all)" if total > len(items) else "")


class ThreadNotFound(CheckpointError):
    """No checkpoint is saved under this thread id; the message lists up to 10 known threads."""

    def __init__(
        self, thread: str, known: Sequence[str] = (), total: int | None = None, where: str = ""
    ) -> None:
        # All arguments go to args, so that the error pickles and re-creates itself.
        super().__init__(thread, tuple(known), total, where)
        self.thread = thread
        self.known = tuple(known)
        self.total = len(self.known) if total is None else total
        self.where = where

    def __str__(self) -> str:
        where = f" in {self.where}" if self.where else ""
        if not self.known:
            return f"no checkpoint for thread {self.thread!r}{where} (no threads saved yet)"
        return (
            f"no checkpoint for thread {self.thread!r}{where} "
            f"(known threads: {_list_text([repr(t) for t in self.known], self.total)})"
        )


class StepNotFound(CheckpointError):
    """The thread exists but has no checkpoint at this step; the message lists its steps."""

    def __init__(self, thread: str, step: int, steps: Sequence[int] = (), where: str = "") -> None:
        super().__init__(thread, step, tuple(steps), where)
        self.thread = thread
        self.step = step
        self.steps = tuple(steps)
        self.where = where

    def __str__(self) -> str:
        where = f" in {self.where}" if self.where else ""
        shown = self.steps if len(self.steps) <= _SHOWN_THREADS else self.steps[-_SHOWN_THREADS:]
        prefix = "... " if len(shown) < len(self.steps) else ""
        return (
            f"thread {self.thread!r}{where} has no checkpoint at step {self.step} "
            f"(steps saved: {prefix}{', '.join(map(str, shown))})"
        )


class CheckpointCorrupt(CheckpointError):
    """The file is not a checkpoint database: not SQLite, truncated or malformed; ``found`` says what it is."""

    def __init__(self, path: str, found: str) -> None:
        super().__init__(path, found)
        self.path = path
        self.found = found

    def __str__(self) -> str:
        return f"{self.path}: not a usable checkpoint file: {self.found}"


class CheckpointLocked(CheckpointError):
    """Another connection (usually another process) held the file longer than ``timeout_s``."""

    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__(path, timeout_s)
        self.path = path
        self.timeout_s = timeout_s

    def __str__(self) -> str:
        return (
            f"{self.path}: locked by another process or connection (waited {self.timeout_s:g} s); "
            "is another run writing to it? Wait for it or give a longer timeout_s"
        )


class GraphMismatch(CheckpointError):
    """The checkpoint was saved by another graph than the one expected (fingerprints differ)."""

    def __init__(
        self,
        thread: str,
        step: int,
        expected: str,
        found: str,
        expected_name: str | None = None,
        found_name: str | None = None,
    ) -> None:
        super().__init__(thread, step, expected, found, expected_name, found_name)
        self.thread = thread
        self.step = step
        self.expected = expected
        self.found = found
        self.expected_name = expected_name
        self.found_name = found_name

    def __str__(self) -> str:
        saved = f"graph {self.found_name!r} " if self.found_name else "a graph "
        this = f"graph {self.expected_name!r} " if self.expected_name else "graph "
        return (
            f"thread {self.thread!r} step {self.step} was saved by {saved}(fingerprint {self.found}), "
            f"but this run's {this}has fingerprint {self.expected}: resume it with the graph it was "
            "saved with, or start a new thread"
        )


# ---------------------------------------------------------------------------
# checkpoints and JSON
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """The saved state of one thread after one superstep.

    ``graph`` is the fingerprint of the graph spec that ran (opaque here);
    ``state`` the run state as JSON-compatible data (``{}`` in light
    listings); ``meta`` free-form JSON-compatible data (``graph_name``, when
    present, names the spec in :class:`GraphMismatch` messages); ``created``
    the unix time of the put.
    """

    thread: str
    step: int
    graph: str
    state: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0


def _find_bad(value: Any, path: str, active: set[int]) -> str | None:
    """The first value under ``value`` that JSON cannot hold, as ``"path: why"`` (None if all is fine)."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None  # nan and inf are written as NaN / Infinity and read back by Python
    if isinstance(value, dict | list | tuple):
        if id(value) in active:
            return f"{path}: refers back to itself (a cycle), which JSON cannot hold"
        active.add(id(value))
        try:
            if isinstance(value, dict):
                for k, v in value.items():
                    if not isinstance(k, str):
                        return f"{path}: key {k!r} is {type(k).__name__}; JSON keys are strings"
                    bad = _find_bad(v, f"{path}[{k!r}]", active)
                    if bad:
                        return bad
            else:
                for i, v in enumerate(value):
                    bad = _find_bad(v, f"{path}[{i}]", active)
                    if bad:
                        return bad
        finally:
            active.discard(id(value))
        return None
    return f"{path}: {type(value).__name__} is not JSON (use dict, list, str, int, float, bool or None)"


def state_to_json(value: Any, label: str = "state") -> str:
    """``value`` as JSON text, or a ``TypeError`` naming the path of the first value JSON cannot hold.

    Stricter than ``json.dumps``: a dict key that is not a string is refused
    (``json.dumps`` would turn ``1`` into ``"1"`` and a resumed run would
    look it up in vain). ``label`` starts the path (``state['tasks'][0]``).
    """
    bad = _find_bad(value, label, set())
    if bad is not None:
        raise TypeError(bad)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _check_key(thread: Any, step: Any) -> None:
    if not isinstance(thread, str) or not thread:
        raise ValueError(f"thread must be a non-empty string, got {thread!r}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")


def _check_graph(graph: Any) -> None:
    if not isinstance(graph, str):
        raise ValueError(f"graph must be a fingerprint string, got {type(graph).__name__} {graph!r}")


def _check_expected(cp: Checkpoint, expect_graph: str | None, expect_name: str | None) -> Checkpoint:
    if expect_graph is not None and cp.graph != expect_graph:
        name = cp.meta.get("graph_name")
        raise GraphMismatch(
            cp.thread,
            cp.step,
            expect_graph,
            cp.graph,
            expect_name,
            name if isinstance(name, str) else None,
        )
    return cp


@runtime_checkable
class Checkpointer(Protocol):
    """Where the Runtime saves a checkpoint after each superstep and finds it again to resume."""

    def put(
        self, thread: str, step: int, graph: str, state: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> Checkpoint:
        """Save ``state`` as step ``step`` of ``thread`` (replacing a checkpoint of that step)."""
        ...

    def latest(
        self, thread: str, *, expect_graph: str | None = None, expect_name: str | None = None
    ) -> Checkpoint:
        """The checkpoint of the highest step of ``thread``."""
        ...

    def get(
        self, thread: str, step: int, *, expect_graph: str | None = None, expect_name: str | None = None
    ) -> Checkpoint:
        """The checkpoint of ``step`` of ``thread``."""
        ...

    def list(self, thread: str, *, light: bool = False) -> builtins.list[Checkpoint]:
        """Every checkpoint of ``thread``, oldest step first."""
        ...

    def threads(self) -> builtins.list[str]:
        """The thread ids that have checkpoints, sorted."""
        ...

    def delete(self, thread: str) -> None:
        """Remove every checkpoint of ``thread``."""
        ...

    def close(self) -> None:
        """Release the storage; further use is an error."""
        ...


# ---------------------------------------------------------------------------
# in memory
# ---------------------------------------------------------------------------


@dataclass
class _Saved:
    graph: str
    state: str  # JSON text
    meta: str  # JSON text
    created: float


class MemoryCheckpointer:
    """Checkpoints in a dict of this process, copied through JSON (thread-safe).

    State is stored as JSON text, so that changing the caller's dict after a
    put, or a returned checkpoint's state, leaves the saved checkpoint as it
    was; and so that it refuses what :class:`SqliteCheckpointer` refuses.
    """

    where = "memory"

    def __init__(self) -> None:
        self._data: dict[str, dict[int, _Saved]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _open(self) -> None:
        if self._closed:
            raise CheckpointError("the memory checkpointer is closed")

    def _load(self, thread: str, step: int, saved: _Saved, light: bool = False) -> Checkpoint:
        return Checkpoint(
            thread=thread,
            step=step,
            graph=saved.graph,
            state={} if light else json.loads(saved.state),
            meta=json.loads(saved.meta),
            created=saved.created,
        )

    def _steps(self, thread: str) -> dict[int, _Saved]:
        steps = self._data.get(thread)
        if not steps:
            known = sorted(self._data)
            raise ThreadNotFound(thread, known[:_SHOWN_THREADS], len(known), self.where)
        return steps

    def put(
        self, thread: str, step: int, graph: str, state: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> Checkpoint:
        _check_key(thread, step)
        _check_graph(graph)
        saved = _Saved(graph, state_to_json(state, "state"), state_to_json(meta or {}, "meta"), time.time())
        with self._lock:
            self._open()
            self._data.setdefault(thread, {})[step] = saved
        return self._load(thread, step, saved)

    def latest(
        self, thread: str, *, expect_graph: str | None = None, expect_name: str | None = None
    ) -> Checkpoint:
        with self._lock:
            self._open()
            steps = self._steps(thread)
            step = max(steps)
            saved = steps[step]
        return _check_expected(self._load(thread, step, saved), expect_graph, expect_name)

    def get(
        self, thread: str, step: int, *, expect_graph: str | None = None, expect_name: str | None = None
    ) -> Checkpoint:
        with self._lock:
            self._open()
            steps = self._steps(thread)
            if step not in steps:
                raise StepNotFound(thread, step, sorted(steps), self.where)
            saved = steps[step]
        return _check_expected(self._load(thread, step, saved), expect_graph, expect_name)

    def list(self, thread: str, *, light: bool = False) -> builtins.list[Checkpoint]:
        with self._lock:
            self._open()
            items = sorted(self._steps(thread).items())
        return [self._load(thread, step, saved, light) for step, saved in items]

    def threads(self) -> builtins.list[str]:
        with self._lock:
            self._open()
            return sorted(self._data)

    def delete(self, thread: str) -> None:
        with self._lock:
            self._open()
            self._steps(thread)
            del self._data[thread]

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def __enter__(self) -> MemoryCheckpointer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryCheckpointer({len(self._data)} threads)"


# ---------------------------------------------------------------------------
# SQLite
# ---------------------------------------------------------------------------

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE checkpoints ("
    " thread TEXT NOT NULL, step INTEGER NOT NULL, graph TEXT NOT NULL,"
    " state TEXT NOT NULL, meta TEXT NOT NULL, created REAL NOT NULL,"
    " PRIMARY KEY (thread, step))",
)

_COLUMNS = "thread, step, graph, state, meta, created"
_LIGHT_COLUMNS = "thread, step, graph, '{}', meta, created"


def _header_problem(path: Path) -> str | None:
    """What is wrong with the file's SQLite header, if anything (the file exists and is not empty)."""
    with path.open("rb") as f:
        head = f.read(100)
    size = path.stat().st_size
    if not head.startswith(_SQLITE_MAGIC[: min(len(head), len(_SQLITE_MAGIC))]):
        return f"not an SQLite database (it starts with {head[:16]!r})"
    if len(head) < 100:
        return f"truncated: {size} bytes, shorter than an SQLite header (100 bytes)"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return f"a damaged SQLite header (page size {page_size})"
    change_counter = head[24:28]
    pages = int.from_bytes(head[28:32], "big")
    valid_for = head[92:96]
    app_id = int.from_bytes(head[68:72], "big")
    if app_id not in (0, _APPLICATION_ID):
        return f"an SQLite database of another application (application id {app_id:#x})"
    # The page count in the header is valid when written by a recent SQLite (valid_for matches).
    # A crash mid-write may leave the file shorter with a journal that repairs it on open: only
    # without one is a short file truncated.
    journals = [path.with_name(path.name + s) for s in ("-journal", "-wal")]
    hot = any(j.exists() and j.stat().st_size > 0 for j in journals)
    if valid_for == change_counter and pages and pages * page_size > size and not hot:
        return f"truncated: the header says {pages * page_size} bytes ({pages} pages), the file has {size}"
    return None


class SqliteCheckpointer:
    """Checkpoints in one SQLite file (standard library ``sqlite3``).

    One row per ``(thread, step)``, state and meta as JSON text; a put of an
    existing step replaces it. Every put is one transaction written to
    SQLite's write-ahead log (``journal_mode`` says the mode SQLite chose;
    ``wal`` unless the file system cannot), so a process killed at any
    moment leaves every completed put readable and no half-written one; a
    power cut may lose the last puts, never tear one. Like any SQLite file
    in WAL mode it belongs on a local file system. Opening checks
    the file (SQLite header, ``PRAGMA quick_check``, the societas
    application id and :data:`SCHEMA_VERSION`) and raises
    :class:`CheckpointCorrupt` or :class:`CheckpointError` if it is not a
    checkpoint file this version can use. When another connection holds the
    file for longer than ``timeout_s``, an operation raises
    :class:`CheckpointLocked`. One object may be shared by several threads.
    """

    def __init__(self, path: str | Path, *, timeout_s: float = 5.0) -> None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s >= 0:
            raise ValueError(f"timeout_s must be a number >= 0, got {timeout_s!r}")
        if not math.isfinite(timeout_s):
            raise ValueError(f"timeout_s must be finite, got {timeout_s!r}")
        self.path = Path(path)
        self.timeout_s = float(timeout_s)
        self.where = str(self.path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self.journal_mode = ""
        if self.path.is_dir():
            raise CheckpointError(f"{self.path}: is a directory, not a checkpoint file")
        if self.path.exists() and self.path.stat().st_size > 0:
            problem = _header_problem(self.path)
            if problem is not None:
                raise CheckpointCorrupt(self.where, problem)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                str(self.path), timeout=self.timeout_s, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise CheckpointError(f"{self.path}: cannot open: {exc}") from None
        self._conn = conn
        try:
            with self._translate():
                self._check_integrity(conn)
                self._check_schema(conn)
                # Write-ahead log: a commit appends to the -wal file without waiting for the disk
                # (synchronous NORMAL), which a killed process cannot tear; readers never block the
                # writer. Switched on only once the file is known to be a checkpoint file.
                self.journal_mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
                conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            self._conn = None
            conn.close()
            raise

    # -- opening -------------------------------------------------------------
    def _check_integrity(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute("PRAGMA quick_check").fetchall()
        found = [
            line.strip()
            for r in rows
            for line in str(r[0]).splitlines()
            if line.strip() and not line.startswith("***")
        ]
        if found != ["ok"]:
            shown = "; ".join(found[:3]) + (f" ... ({len(found)} problems)" if len(found) > 3 else "")
            raise CheckpointCorrupt(self.where, f"damaged SQLite database (quick_check: {shown})")

    def _tables(self, conn: sqlite3.Connection) -> set[str]:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {str(r[0]) for r in rows}

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == 0:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have created the schema while this one waited for the lock.
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                if app_id == 0:
                    tables = self._tables(conn)
                    if tables:
                        raise CheckpointCorrupt(
                            self.where,
                            "an SQLite database without societas checkpoints "
                            f"(tables: {', '.join(sorted(tables))})",
                        )
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                    )
                    conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        if app_id not in (0, _APPLICATION_ID):
            raise CheckpointCorrupt(
                self.where, f"an SQLite database of another application (application id {app_id:#x})"
            )
        if "meta" not in self._tables(conn):
            raise CheckpointCorrupt(self.where, "a societas checkpoint file without its meta table")
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = None if row is None else str(row[0])
        if version != str(SCHEMA_VERSION):
            raise CheckpointError(
                f"{self.path}: checkpoint schema version {version}, this version of societas reads "
                f"version {SCHEMA_VERSION}: open it with the societas that wrote it, or start a new file"
            )

    # -- plumbing ------------------------------------------------------------
    @contextmanager
    def _translate(self) -> Iterator[None]:
        """Turn ``sqlite3`` errors into :class:`CheckpointError` subclasses naming the file."""
        try:
            yield
        except sqlite3.Error as exc:
            text = str(exc)
            if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
                raise CheckpointLocked(self.where, self.timeout_s) from None
            if "not a database" in text or "malformed" in text or "disk image" in text:
                raise CheckpointCorrupt(self.where, text) from None
            raise CheckpointError(f"{self.where}: {type(exc).__name__}: {text}") from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise CheckpointError(f"{self.path}: the checkpointer is closed")
        return self._conn

    def _row(self, row: Sequence[Any]) -> Checkpoint:
        thread, step, graph, state, meta, created = row
        try:
            return Checkpoint(
                thread=str(thread),
                step=int(step),
                graph=str(graph),
                state=json.loads(state),
                meta=json.loads(meta),
                created=float(created),
            )
        except (ValueError, TypeError) as exc:
            raise CheckpointCorrupt(
                self.where, f"thread {thread!r} step {step}: the saved state is not JSON ({exc})"
            ) from None

    def _not_found(self, conn: sqlite3.Connection, thread: str) -> ThreadNotFound:
        total = conn.execute("SELECT COUNT(DISTINCT thread) FROM checkpoints").fetchone()[0]
        rows = conn.execute(
            "SELECT DISTINCT thread FROM checkpoints ORDER BY thread LIMIT ?", (_SHOWN_THREADS,)
        ).fetchall()
        return ThreadNotFound(thread, [str(r[0]) for r in rows], int(total), self.where)

    # -- the protocol --------------------------------------------------------
    def put(
        self, thread: str, step: int, graph: str, state: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> Checkpoint:
        _check_key(thread, step)
        _check_graph(graph)
        state_text = state_to_json(state, "state")
        meta_text = state_to_json(meta or {}, "meta")
        created = time.time()
        with self._lock, self._translate():
            conn = self._connection()
            # One statement in autocommit mode is one transaction: all of the row or none of it.
            conn.execute(
                f"INSERT OR REPLACE INTO checkpoints ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                (thread, step, graph, state_text, meta_text, created),
            )
        return Checkpoint(thread, step, graph, json.loads(state_text), json.loads(meta_text), created)

    def latest(
        self, thread: str, *, expect_graph: str | None = None, expect_name: str | None = None
    ) -> Checkpoint:
        with self._lock, self._translate():
            conn = self._connection()
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM checkpoints WHERE thread = ? ORDER BY step DESC LIMIT 1", (thread,)
            ).fetchone()
            if row is None:
                raise self._not_found(conn, thread)
        return _check_expected(self._row(row), expect_graph, expect_name)

    def get(
        self, thread: str, step: int, *, expect_graph: str | None = None, expect_name: str | None = None
    ) -> Checkpoint:
        with self._lock, self._translate():
            conn = self._connection()
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM checkpoints WHERE thread = ? AND step = ?", (thread, step)
            ).fetchone()
            if row is None:
                steps = [
                    int(r[0])
                    for r in conn.execute(
                        "SELECT step FROM checkpoints WHERE thread = ? ORDER BY step", (thread,)
                    ).fetchall()
                ]
                if not steps:
                    raise self._not_found(conn, thread)
                raise StepNotFound(thread, step, steps, self.where)
        return _check_expected(self._row(row), expect_graph, expect_name)

    def list(self, thread: str, *, light: bool = False) -> builtins.list[Checkpoint]:
        columns = _LIGHT_COLUMNS if light else _COLUMNS
        with self._lock, self._translate():
            conn = self._connection()
            rows = conn.execute(
                f"SELECT {columns} FROM checkpoints WHERE thread = ? ORDER BY step", (thread,)
            ).fetchall()
            if not rows:
                raise self._not_found(conn, thread)
        return [self._row(r) for r in rows]

    def threads(self) -> builtins.list[str]:
        with self._lock, self._translate():
            rows = (
                self._connection()
                .execute("SELECT DISTINCT thread FROM checkpoints ORDER BY thread")
                .fetchall()
            )
        return [str(r[0]) for r in rows]

    def delete(self, thread: str) -> None:
        with self._lock, self._translate():
            conn = self._connection()
            deleted = conn.execute("DELETE FROM checkpoints WHERE thread = ?", (thread,)).rowcount
            if deleted == 0:
                raise self._not_found(conn, thread)

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> SqliteCheckpointer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"SqliteCheckpointer({str(self.path)!r}, {state})"

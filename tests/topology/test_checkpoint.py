"""Checkpointers: round trips, errors that name what is wrong, and a SQLite file that survives kill -9."""

from __future__ import annotations

import json
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from societas.topology.checkpoint import (
    SCHEMA_VERSION,
    Checkpoint,
    CheckpointCorrupt,
    Checkpointer,
    CheckpointError,
    CheckpointLocked,
    GraphMismatch,
    MemoryCheckpointer,
    SqliteCheckpointer,
    StepNotFound,
    ThreadNotFound,
    state_to_json,
)

STATE = {
    "tasks": [{"node": "a", "state": {"x": 1.5, "ok": True, "none": None, "text": "héllo ✓"}}],
    "step": 3,
    "nested": {"deep": [[1, 2], {"k": "v"}]},
}


@pytest.fixture(params=["memory", "sqlite"])
def cp(request, tmp_path):
    c = MemoryCheckpointer() if request.param == "memory" else SqliteCheckpointer(tmp_path / "cp.db")
    yield c
    c.close()


# ---------------------------------------------------------------------------
# both implementations
# ---------------------------------------------------------------------------


def test_implements_the_protocol(cp):
    assert isinstance(cp, Checkpointer)


def test_put_then_latest_get_and_list_round_trip(cp):
    before = time.time()
    saved = cp.put("t1", 0, "fp1", STATE, {"graph_name": "debate"})
    cp.put("t1", 1, "fp1", {**STATE, "step": 4})
    assert saved == Checkpoint("t1", 0, "fp1", STATE, {"graph_name": "debate"}, saved.created)
    assert before <= saved.created <= time.time()
    latest = cp.latest("t1")
    assert (latest.step, latest.state["step"], latest.meta) == (1, 4, {})
    assert cp.get("t1", 0) == saved
    assert [c.step for c in cp.list("t1")] == [0, 1]
    assert cp.list("t1")[0].state == STATE
    light = cp.list("t1", light=True)
    assert [(c.step, c.state, c.graph) for c in light] == [(0, {}, "fp1"), (1, {}, "fp1")]
    assert light[0].meta == {"graph_name": "debate"}


def test_put_of_an_existing_step_replaces_it(cp):
    cp.put("t", 2, "g", {"v": "first"})
    cp.put("t", 2, "g", {"v": "second"})
    assert [c.state for c in cp.list("t")] == [{"v": "second"}]


def test_latest_is_the_highest_step_whatever_the_put_order(cp):
    for step in (3, 10, 2):
        cp.put("t", step, "g", {"s": step})
    assert cp.latest("t").state == {"s": 10}
    assert [c.step for c in cp.list("t")] == [2, 3, 10]


def test_saved_state_is_independent_of_the_callers_dicts(cp):
    state = {"items": [1, 2], "inner": {"a": 1}}
    returned = cp.put("t", 0, "g", state)
    state["items"].append(3)
    state["inner"]["a"] = 99
    returned.state["items"].append(4)
    got = cp.latest("t")
    assert got.state == {"items": [1, 2], "inner": {"a": 1}}
    got.state["inner"]["a"] = -1
    assert cp.latest("t").state == {"items": [1, 2], "inner": {"a": 1}}


def test_tuples_come_back_as_lists(cp):
    cp.put("t", 0, "g", {"pair": (1, 2)})
    assert cp.latest("t").state == {"pair": [1, 2]}


def test_threads_are_separate_and_sorted(cp):
    cp.put("b", 0, "g", {"who": "b"})
    cp.put("a", 0, "g", {"who": "a"})
    cp.put("a", 1, "g", {"who": "a1"})
    assert cp.threads() == ["a", "b"]
    assert cp.latest("b").state == {"who": "b"}
    cp.delete("a")
    assert cp.threads() == ["b"]
    with pytest.raises(ThreadNotFound):
        cp.latest("a")


def test_unknown_thread_names_it_and_lists_up_to_ten_known(cp):
    with pytest.raises(ThreadNotFound, match="no threads saved yet") as info:
        cp.latest("ghost")
    assert "'ghost'" in str(info.value)
    for i in range(12):
        cp.put(f"run-{i:02d}", 0, "g", {})
    for call in (lambda: cp.latest("ghost"), lambda: cp.get("ghost", 0), lambda: cp.list("ghost")):
        with pytest.raises(ThreadNotFound) as info:
            call()
        text = str(info.value)
        assert "'ghost'" in text and "'run-00'" in text and "'run-09'" in text
        assert "'run-10'" not in text and "12 in all" in text
        assert info.value.thread == "ghost"
    with pytest.raises(ThreadNotFound, match="ghost"):
        cp.delete("ghost")


def test_unknown_step_lists_the_saved_steps(cp):
    cp.put("t", 0, "g", {})
    cp.put("t", 2, "g", {})
    with pytest.raises(StepNotFound) as info:
        cp.get("t", 1)
    assert "step 1" in str(info.value) and "steps saved: 0, 2" in str(info.value)


def test_graph_mismatch_names_both_fingerprints_and_spec_names(cp):
    cp.put("t", 0, "abc123", {}, {"graph_name": "debate"})
    assert cp.latest("t", expect_graph="abc123").step == 0
    with pytest.raises(GraphMismatch) as info:
        cp.latest("t", expect_graph="def456", expect_name="chain")
    text = str(info.value)
    assert "abc123" in text and "def456" in text and "'debate'" in text and "'chain'" in text
    with pytest.raises(GraphMismatch, match="abc123.*def456"):
        cp.get("t", 0, expect_graph="def456")


def test_state_that_is_not_json_names_the_path_and_writes_nothing(cp):
    cp.put("t", 0, "g", {"ok": 1})
    bad = {"tasks": [{"state": {"x": {1, 2}}}]}
    with pytest.raises(TypeError) as info:
        cp.put("t", 1, "g", bad)
    assert str(info.value).startswith("state['tasks'][0]['state']['x']: set is not JSON")
    with pytest.raises(TypeError, match=r"state\['m'\]: key 1 is int"):
        cp.put("t", 1, "g", {"m": {1: "a"}})
    with pytest.raises(TypeError, match=r"meta\['when'\]: object is not JSON"):
        cp.put("t", 1, "g", {}, {"when": object()})
    assert [c.step for c in cp.list("t")] == [0]
    with pytest.raises(ThreadNotFound):
        cp.latest("never")  # the failed puts of other threads wrote nothing either


def test_cycles_are_refused(cp):
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(TypeError, match=r"state\['self'\]: refers back to itself"):
        cp.put("t", 0, "g", loop)


@pytest.mark.parametrize(("thread", "step"), [("", 0), (3, 0), ("t", -1), ("t", True), ("t", 1.0)])
def test_bad_keys_are_refused(cp, thread, step):
    with pytest.raises(ValueError, match="thread|step"):
        cp.put(thread, step, "g", {})


def test_closed_checkpointer_refuses_use(cp):
    cp.put("t", 0, "g", {})
    cp.close()
    cp.close()  # twice is fine
    with pytest.raises(CheckpointError, match="closed"):
        cp.latest("t")


def test_context_manager_closes(tmp_path):
    with SqliteCheckpointer(tmp_path / "c.db") as c:
        c.put("t", 0, "g", {})
    with pytest.raises(CheckpointError, match="closed"):
        c.threads()
    with MemoryCheckpointer() as m:
        m.put("t", 0, "g", {})
    with pytest.raises(CheckpointError, match="closed"):
        m.threads()


def test_many_threads_put_at_once(cp):
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for step in range(20):
                cp.put(f"w{i}", step, "g", {"i": i, "step": step})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert cp.threads() == [f"w{i}" for i in range(6)]
    assert all(cp.latest(f"w{i}").state == {"i": i, "step": 19} for i in range(6))


def test_errors_pickle_with_their_message():
    for err in (
        ThreadNotFound("x", ["a", "b"], 2, "f.db"),
        StepNotFound("x", 3, [0, 1], "f.db"),
        CheckpointCorrupt("f.db", "garbage"),
        CheckpointLocked("f.db", 0.5),
        GraphMismatch("x", 1, "aa", "bb", "chain", "debate"),
    ):
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == str(err)
        assert isinstance(again, CheckpointError)


def test_state_to_json_is_compact_and_exact():
    text = state_to_json(STATE)
    assert json.loads(text) == STATE and " " not in text.replace("héllo ✓", "")


# ---------------------------------------------------------------------------
# SQLite file
# ---------------------------------------------------------------------------


def test_sqlite_checkpoints_persist_across_opens(tmp_path):
    path = tmp_path / "sub" / "dir" / "run.db"  # parent folders are created
    with SqliteCheckpointer(path) as c:
        c.put("t", 0, "g", STATE, {"graph_name": "x"})
        c.put("t", 1, "g", {"n": 1})
    with SqliteCheckpointer(path) as c:
        assert c.get("t", 0).state == STATE and c.latest("t").state == {"n": 1}
        assert c.threads() == ["t"]


def test_sqlite_two_objects_on_one_file_see_each_others_puts(tmp_path):
    a = SqliteCheckpointer(tmp_path / "c.db")
    b = SqliteCheckpointer(tmp_path / "c.db")
    a.put("t", 0, "g", {"from": "a"})
    assert b.latest("t").state == {"from": "a"}
    b.put("t", 1, "g", {"from": "b"})
    assert a.latest("t").state == {"from": "b"}
    a.close()
    b.close()


def test_sqlite_garbage_file_is_corrupt_naming_the_file(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database at all\n" * 50)
    with pytest.raises(CheckpointCorrupt) as info:
        SqliteCheckpointer(path)
    assert str(path) in str(info.value) and "not an SQLite database" in str(info.value)


def test_sqlite_truncated_file_is_corrupt(tmp_path):
    path = tmp_path / "cut.db"
    with SqliteCheckpointer(path) as c:
        for step in range(30):
            c.put("t", step, "g", {"blob": "x" * 3000, "step": step})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointCorrupt) as info:
        SqliteCheckpointer(path)
    assert str(path) in str(info.value) and "truncated" in str(info.value)
    # Cut inside the 100-byte header.
    path.write_bytes(data[:40])
    with pytest.raises(CheckpointCorrupt, match="truncated"):
        SqliteCheckpointer(path)


def test_sqlite_damaged_pages_are_corrupt(tmp_path):
    path = tmp_path / "damaged.db"
    with SqliteCheckpointer(path) as c:
        for step in range(30):
            c.put("t", step, "g", {"blob": "x" * 3000, "step": step})
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[2 * page : 2 * page + 300] = b"\xff" * 300  # the third page, past the header
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupt, match="damaged SQLite database"):
        SqliteCheckpointer(path)


def test_sqlite_database_of_something_else_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(CheckpointCorrupt, match="without societas checkpoints.*users"):
        SqliteCheckpointer(path)
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert tables == {"users"}


def test_sqlite_unknown_schema_version_is_refused(tmp_path):
    path = tmp_path / "future.db"
    SqliteCheckpointer(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(CheckpointError) as info:
        SqliteCheckpointer(path)
    assert "schema version 99" in str(info.value) and f"version {SCHEMA_VERSION}" in str(info.value)
    assert str(path) in str(info.value)


def test_sqlite_locked_file_times_out_naming_file_and_timeout(tmp_path):
    path = tmp_path / "busy.db"
    c = SqliteCheckpointer(path, timeout_s=0.2)
    c.put("t", 0, "g", {"v": 0})
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        with pytest.raises(CheckpointLocked) as info:
            c.put("t", 1, "g", {"v": 1})
        assert time.monotonic() - started >= 0.15
        assert str(path) in str(info.value) and "0.2 s" in str(info.value)
        # Readers are not blocked by a writer (write-ahead log): a second object opens and reads.
        with SqliteCheckpointer(path, timeout_s=0.1) as reader:
            assert reader.latest("t").state == {"v": 0}
            with pytest.raises(CheckpointLocked):
                reader.delete("t")
    finally:
        other.execute("ROLLBACK")
        other.close()
    # Once the other connection lets go, the same object works again and nothing was half-written.
    c.put("t", 1, "g", {"v": 1})
    assert [x.state for x in c.list("t")] == [{"v": 0}, {"v": 1}]
    c.close()


def test_sqlite_open_of_a_new_file_held_by_another_writer_is_locked(tmp_path):
    path = tmp_path / "new.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CheckpointLocked, match=r"new\.db.*0\.1 s"):
            SqliteCheckpointer(path, timeout_s=0.1)
    finally:
        other.execute("ROLLBACK")
        other.close()
    with SqliteCheckpointer(path) as c:
        assert c.threads() == [] and c.journal_mode == "wal"


def test_sqlite_waits_for_a_short_lock(tmp_path):
    path = tmp_path / "wait.db"
    c = SqliteCheckpointer(path, timeout_s=5)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    timer = threading.Timer(0.3, lambda: other.execute("ROLLBACK"))
    timer.start()
    c.put("t", 0, "g", {"v": 1})
    timer.join()
    other.close()
    assert c.latest("t").state == {"v": 1}
    c.close()


def test_sqlite_bad_timeout_is_refused(tmp_path):
    with pytest.raises(ValueError, match="timeout_s"):
        SqliteCheckpointer(tmp_path / "x.db", timeout_s=-1)


_WRITER = textwrap.dedent(
    """
    import sys
    from societas.topology.checkpoint import SqliteCheckpointer

    cp = SqliteCheckpointer(sys.argv[1])
    step = 0
    while True:
        blob = str(step) * 5000
        cp.put("run", step, "fp", {"step": step, "blob": blob, "len": len(blob)}, {"graph_name": "g"})
        if step == 3:
            print("ready", flush=True)
        step += 1
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sqlite_survives_kill_9_mid_put(tmp_path):
    path = tmp_path / "killed.db"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    for delay in (0.0, 0.1):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            assert line.strip() == "ready", proc.stderr.read() if proc.stderr else ""
            time.sleep(delay)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        with SqliteCheckpointer(path) as c:
            latest = c.latest("run")
            assert latest.step >= 3 and latest.state["step"] == latest.step
            assert latest.state["len"] == len(latest.state["blob"]) == len(str(latest.step)) * 5000
            assert latest.meta == {"graph_name": "g"}
            steps = [x.step for x in c.list("run", light=True)]
            assert steps == list(range(steps[-1] + 1))


def test_sqlite_repr_and_path(tmp_path):
    c = SqliteCheckpointer(tmp_path / "r.db")
    assert "r.db" in repr(c) and "open" in repr(c)
    c.close()
    assert "closed" in repr(c)
    assert isinstance(c.path, Path)

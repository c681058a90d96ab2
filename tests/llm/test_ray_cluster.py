"""Pointing societas at a Ray cluster that is already running: a head started here
with ``ray start --head``, joined by address (and by ``RAY_ADDRESS``) by the evolve
layer's Ray executor, which must give what it gives on a local instance and leave
the cluster up; and how :func:`societas.marl.cluster.connect_ray`, which the
rollout actors share, joins or starts Ray (against a stand-in for ray)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from societas.evolve.config import load_config
from societas.evolve.controller import Controller
from societas.evolve.database import ProgramStore
from societas.evolve.evaluator import TaskEvaluator, run_evaluation
from societas.evolve.executors import ExecutorError, ProcessExecutor, RayExecutor
from societas.evolve.task import load_task
from societas.marl.cluster import connect_ray
from societas.marl.llm import distributed
from societas.marl.llm.backend import TrainConfig

from .test_distributed import CountA

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

CURVE = Path(__file__).resolve().parents[1] / "evolve" / "tasks" / "curve_fit"


# Ports a head takes by default for its other parts: a GCS port among them stops 'ray start'.
RAY_DEFAULT_PORTS = {6379, 8076, 8077, 8265, 10001, 52365, 52366}


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RAY_DEFAULT_PORTS and not 10002 <= port <= 19999:  # nor a worker port
            return port


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A one-node cluster with 2 CPUs, started as a user would, stopped at the end.

    Without token authentication: Ray (2.59 and later) turns it on for ``ray start``,
    and a driver then needs ``RAY_AUTH_MODE=token`` in its environment before ray is
    imported, which this test process (where other tests imported ray) cannot have.
    """
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
        yield from _head(tmp_path_factory)


def _head(tmp_path_factory):
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    assert ray_bin, "the ray command line comes with the ray package"
    port = free_port()
    log = tmp_path_factory.mktemp("ray-head") / "head.log"
    with open(log, "w") as out:
        head = subprocess.Popen(
            [
                ray_bin,
                "start",
                "--head",
                f"--port={port}",
                "--num-cpus=2",
                "--include-dashboard=false",
                "--disable-usage-stats",
                "--block",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log.read_text():
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start --head did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        try:
            # --block: the command drains the node and stops what it started. The signal goes
            # to it alone: sent to the whole group it also stops the GCS, and the drain then
            # waits its full 30 s for it.
            os.kill(head.pid, signal.SIGTERM)
            head.wait(timeout=60)
        except ProcessLookupError:
            head.wait()  # it had stopped already (a head that did not come up)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # whatever of the cluster is still there
        head.wait()
        # Ray's record of "the cluster on this machine", if it is still ours (ray stop would remove it,
        # but it also stops every other Ray of this machine).
        record = Path("/tmp/ray/ray_current_cluster")
        if record.is_file() and record.read_text().strip().endswith(f":{port}"):
            record.unlink()


def joined_gcs() -> str:
    """The port of the GCS this driver is connected to (Ray names the host by the node's IP)."""
    return ray.get_runtime_context().gcs_address.rsplit(":", 1)[1]


def test_the_evolve_executor_joins_the_cluster_and_leaves_it_running(cluster):
    evaluator = TaskEvaluator(CURVE / "evaluator.py", load_config(CURVE / "config.yaml").evaluator)
    jobs = [evaluator.job((CURVE / "initial_program.py").read_text())] * 3
    local = [run_evaluation(job) for job in jobs]
    executor = RayExecutor(workers=2, address=cluster)
    try:
        assert joined_gcs() == cluster.rsplit(":", 1)[1]  # joined, not a local instance of its own
        assert ray.cluster_resources()["CPU"] == 2.0  # the cluster's resources, not a num_cpus of ours
        remote = dict(executor.map_unordered(run_evaluation, jobs))
    finally:
        executor.close()
    assert [remote[i].metrics for i in range(3)] == [o.metrics for o in local]
    assert not ray.is_initialized()  # close() disconnected this driver ...
    again, started = connect_ray("a check", address=cluster)  # ... and the cluster is still there
    assert started and joined_gcs() == cluster.rsplit(":", 1)[1]
    again.shutdown()


def signature(run_dir):
    store = ProgramStore(Path(run_dir) / "programs.db")
    try:
        return [(p.iteration, p.id, p.status, p.metrics) for p in store.programs()]
    finally:
        store.close()


def test_an_evolve_run_on_the_cluster_named_by_RAY_ADDRESS_is_the_local_run(cluster, tmp_path, monkeypatch):
    task = load_task(CURVE)
    for name in ("local", "cluster"):
        cfg = load_config(task.config_path)
        cfg.max_iterations = 6
        if name == "cluster":
            monkeypatch.setenv("RAY_ADDRESS", cluster)
            executor = RayExecutor(workers=2)
            assert joined_gcs() == cluster.rsplit(":", 1)[1]
        else:
            executor = ProcessExecutor(2)
        ctl = Controller(task, cfg, tmp_path / name, executor=executor)
        try:
            ctl.run()
        finally:
            ctl.close()
    assert signature(tmp_path / "cluster") == signature(tmp_path / "local")
    assert not ray.is_initialized()


def test_a_wrong_address_is_a_clear_error():
    with pytest.raises(
        ExecutorError, match=r"cannot join the Ray cluster at '127.0.0.1:1'.*ray start --head"
    ):
        RayExecutor(workers=2, address="127.0.0.1:1")
    assert not ray.is_initialized()


DRIVER = """
import json, os, sys
from pathlib import Path
from societas.marl.llm.backend import TrainConfig
from societas.marl.llm.loop import train
from societas.marl.llm.trainer import GRPOConfig
from tests.llm.test_distributed import CountA

model, out, workers = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
where = out.parent / (out.name + ".where")


class Where(CountA):
    # CountA, noting which process (and which Ray) ran each batch of episodes
    def run_episodes(self, llms, episodes, *, train):
        import ray
        gcs = ray.get_runtime_context().gcs_address if ray.is_initialized() else "none"
        with open(where, "a") as f:
            f.write(f"{os.getpid()} {gcs}\\n")
        return super().run_episodes(llms, episodes, train=train)


cfg = TrainConfig(model=model, steps=2, eval_every=1, rollout_workers=workers, threads=1, grpo=GRPOConfig(lr=1e-2))
train(Where(), cfg, out=out)
import ray
print(json.dumps({"pid": os.getpid(), "ray_left_running": ray.is_initialized()}))
"""


def fresh_driver(script: str, args: list[str], env: dict) -> str:
    """Run ``script`` in a new Python process, as a user starts a driver; its standard output.

    In-process drivers cannot join the cluster reliably: a local Ray started earlier in a
    process (by another test) leaves RAY_AUTH_MODE=token set there for good, and the cluster,
    which runs without token authentication, destroys every actor such a driver makes.
    """
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def tiny_model(tiny_llm, tmp_path: Path) -> str:
    """The tiny test model saved where a fresh process (and the cluster's actors) can load it."""
    model_dir = tmp_path / "tiny-model"
    tiny_llm.model.save_pretrained(model_dir)
    tiny_llm.tokenizer.save_pretrained(model_dir)
    return "hf:" + str(model_dir)


def run_driver(model: str, out: Path, workers: int, env: dict) -> dict:
    """A training run (:data:`DRIVER`) in a fresh driver process."""
    said = fresh_driver(DRIVER, [model, str(out), str(workers)], env)
    return json.loads(said.strip().splitlines()[-1])


def test_training_with_rollout_actors_on_the_cluster_named_by_RAY_ADDRESS_is_the_local_run(
    cluster, tiny_llm, tmp_path
):
    model = tiny_model(tiny_llm, tmp_path)
    local = run_driver(model, tmp_path / "local", 0, {})
    remote = run_driver(model, tmp_path / "cluster", 2, {"RAY_ADDRESS": cluster, "RAY_AUTH_MODE": "disabled"})
    assert not local["ray_left_running"] and not remote["ray_left_running"]

    def rows(name):
        return [json.loads(ln) for ln in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]

    mine, theirs = rows("local"), rows("cluster")
    assert [r["kind"] for r in theirs] == ["eval", "train", "eval", "train", "eval"]
    # The actors sample what the driver samples (per-episode seeds): the same rewards, tokens and
    # gradients, in the second step too, which the actors sample with the weights they were sent.
    for a, b in zip(mine, theirs):
        assert a["kind"] == b["kind"] and a.get("reward") == b.get("reward")
        if a["kind"] == "train":
            assert a["p/tokens"] == b["p/tokens"]
            assert b["p/grad_norm"] == pytest.approx(a["p/grad_norm"], rel=1e-4)
    # where the episodes ran: locally in the driver; on the cluster in two actors of its own
    here = {ln.split()[0] for ln in (tmp_path / "local.where").read_text().splitlines()}
    assert here == {str(local["pid"])}
    there = [ln.split() for ln in (tmp_path / "cluster.where").read_text().splitlines()]
    assert len({pid for pid, _ in there}) == 2 and str(remote["pid"]) not in {pid for pid, _ in there}
    assert {gcs.rsplit(":", 1)[1] for _, gcs in there} == {cluster.rsplit(":", 1)[1]}
    again, started = connect_ray("a check", address=cluster)  # the cluster is still up
    assert started and joined_gcs() == cluster.rsplit(":", 1)[1]
    again.shutdown()


MISMATCH = """
import sys
from societas.marl.llm.distributed import RayRollouts
from tests.llm.test_distributed import CountA

try:
    RayRollouts(CountA(), sys.argv[1], 1, threads=1)
except RuntimeError as e:
    print(e)
else:
    print("the actors started")
"""


def test_actors_that_die_on_a_cluster_of_another_authentication_mode_say_why(cluster, tiny_llm, tmp_path):
    # the cluster runs without token authentication; this driver has it on
    env = {"RAY_ADDRESS": cluster, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0123456789abcdef" * 4}
    said = fresh_driver(MISMATCH, [tiny_model(tiny_llm, tmp_path)], env)
    assert "rollout worker 0 of 1 failed to start" in said
    assert "On the Ray cluster this process joined" in said and "RAY_AUTH_MODE" in said


def test_without_an_address_a_local_instance_starts_beside_the_cluster(cluster):
    # Last: a local instance leaves RAY_AUTH_MODE=token set in this process for good, and the
    # cluster (without token authentication) would destroy the actors this process makes later.
    # A bare ray.init() would join the cluster 'ray start' runs on this machine; no address means local.
    executor = RayExecutor(workers=1)
    try:
        assert joined_gcs() != cluster.rsplit(":", 1)[1]
        assert ray.cluster_resources()["CPU"] == 1.0
    finally:
        executor.close()
    assert not ray.is_initialized()


class FakeRay:
    """What connect_ray asks of ray: is_initialized and init."""

    def __init__(self, initialized: bool = False) -> None:
        self.initialized, self.calls = initialized, []

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **kwargs) -> None:
        self.calls.append(kwargs)
        self.initialized = True


@pytest.fixture
def fake_ray(monkeypatch):
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return fake


def test_connect_ray_joins_by_address_without_resources_of_its_own(fake_ray, monkeypatch):
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: socket.socket())
    ray_module, started = connect_ray("a test", address="10.0.0.5:6379", local_cpus=8)
    assert ray_module is fake_ray and started
    assert fake_ray.calls == [{"address": "10.0.0.5:6379", "log_to_driver": True}]  # no num_cpus


def test_connect_ray_reads_RAY_ADDRESS_and_otherwise_starts_a_new_local_instance(fake_ray, monkeypatch):
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: socket.socket())
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    connect_ray("a test", local_cpus=3)
    monkeypatch.delenv("RAY_ADDRESS")
    fake_ray.initialized = False
    connect_ray("a test", local_cpus=3, log_to_driver=False)
    assert fake_ray.calls == [
        {"address": "auto", "log_to_driver": True},
        {"address": "local", "include_dashboard": False, "log_to_driver": False, "num_cpus": 3},
    ]
    assert connect_ray("a test", address="10.0.0.5:6379") == (fake_ray, False)  # running: left alone
    assert len(fake_ray.calls) == 2


def test_the_rollout_actors_take_the_address_to_connect_ray(monkeypatch):
    seen = {}

    def fake_connect(needed_for, **kwargs):
        seen.update(kwargs, needed_for=needed_for)
        raise ConnectionError("stop here")

    monkeypatch.setattr(distributed, "connect_ray", fake_connect)
    with pytest.raises(ConnectionError, match="stop here"):
        distributed.RayRollouts(CountA(), "embedded", 2, address="10.0.0.5:6379")
    assert seen["address"] == "10.0.0.5:6379" and seen["needed_for"] == "rollout_workers > 0"
    assert TrainConfig(ray_address="10.0.0.5:6379").ray_address == "10.0.0.5:6379"

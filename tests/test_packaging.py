"""The installed package, as a user gets it from ``pip install .``.

The wheel is built from a copy of the source tree, installed without its
dependencies into a fresh virtual environment, and then used from another
directory: it must install nothing at the top level but ``societas``, must not
shadow (or be shadowed by) the OpenAI Agents SDK's top-level ``agents``, must
ship the built-in discovery tasks whole (their YAML configs included), and its
``societas`` command must reach every command line. The fresh environment
borrows the test environment's dependencies through a path entry, which adds
their directory to ``sys.path`` without running that directory's ``.pth``
files, so the test environment's editable install of societas stays invisible.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SKIP_DIRS = {
    ".git",
    ".venv",
    ".venv-vllm",
    "build",
    "dist",
    "runs",
    ".pytest_cache",
    ".hypothesis",
    "__pycache__",
}

pytestmark = pytest.mark.slow


def _copy_source(dst: Path) -> None:
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if n in SKIP_DIRS or n.endswith(".egg-info")}

    shutil.copytree(REPO, dst, ignore=ignore, symlinks=True)


def _run(cmd: list[str], cwd: Path, timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{cmd} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the wheel, install it into a fresh venv (no deps), return paths."""
    root = tmp_path_factory.mktemp("packaging")
    src = root / "src"
    _copy_source(src)
    dist = root / "dist"
    _run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
        cwd=root,
    )
    (wheel,) = dist.glob("societas-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], cwd=root)
    site = Path(
        _run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root
        ).stdout.strip()
    )
    work = root / "elsewhere"
    work.mkdir()
    return {"wheel": wheel, "venv": venv, "py": py, "site": site, "work": work}


def _with_dependencies(installed: dict[str, Path]) -> None:
    """Let the fresh venv import the test environment's dependencies (not its societas): every
    site-packages directory the test environment sees, its own and, for a venv made with
    ``--system-site-packages`` (a GPU user's torch), the system's, where pip then leaves what is there."""
    pth = installed["site"] / "zz_test_dependencies.pth"
    if not pth.exists():
        own = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        seen = [
            p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()
        ]
        dirs = list(dict.fromkeys([*own, *seen]))
        pth.write_text("".join(d + "\n" for d in dirs))


def test_wheel_installs_only_societas_at_the_top_level(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"societas"}, sorted(top)
    # the built-in discovery tasks are folders read by path: configs and programs ship whole
    for task in ("cfr", "psro"):
        for f in ("config.yaml", "demo.yaml", "evaluator.py", "initial_program.py"):
            assert f"societas/evolve/tasks/{task}/{f}" in names, f"{task}/{f} missing from the wheel"
    for f in ("building_blocks.yaml", "hour.yaml", "seeds/vad_cfr.py"):  # the CFR task's library and seeds
        assert f"societas/evolve/tasks/cfr/{f}" in names, f"cfr/{f} missing from the wheel"
    assert not any(n.startswith("societas/__init__") for n in names), "societas must stay a namespace"
    for layer in ("agents", "topology", "marl", "evolve"):  # typed (PEP 561), layer by layer
        assert f"societas/{layer}/py.typed" in names, f"societas/{layer}/py.typed missing from the wheel"
    # every module of the four layers ships (a package missing from pyproject's list would not)
    for layer in ("agents", "topology", "marl", "evolve"):
        for source in (REPO / layer).rglob("*.py"):
            member = f"societas/{source.relative_to(REPO).as_posix()}"
            assert member in names, f"{member} missing from the wheel"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert (
        "societas = societas.evolve.console:main"
        in zipfile.ZipFile(installed["wheel"]).read(entry_points).decode()
    )


def test_no_generic_top_level_module_is_installed(installed):
    site = installed["site"]
    ours = {p.name for p in site.iterdir()} - {
        p.name
        for p in site.iterdir()
        if p.name.startswith(
            ("pip", "_distutils_hack", "setuptools", "pkg_resources", "__pycache__", "distutils-precedence")
        )
    }
    assert {n for n in ours if not n.endswith(".dist-info")} == {"societas"}, sorted(ours)
    # before the dependencies are visible, `import agents` finds nothing of ours
    proc = _run([str(installed["py"]), "-c", "import agents"], cwd=installed["work"], check=False)
    assert proc.returncode != 0 and "No module named 'agents'" in proc.stderr, proc.stderr


def test_openai_agents_and_societas_agents_side_by_side(installed):
    """With the OpenAI Agents SDK installed too, each import gets its own package."""
    _with_dependencies(installed)
    code = (
        "import json, agents, societas.agents\n"
        "from agents import Agent as TheirAgent\n"
        "from societas.agents import Agent as OurAgent\n"
        "print(json.dumps({'theirs': agents.__file__, 'ours': societas.agents.__file__,\n"
        "  'their_agent': TheirAgent.__module__, 'our_agent': OurAgent.__module__}))\n"
    )
    out = json.loads(
        _run([str(installed["py"]), "-c", code], cwd=installed["work"]).stdout.strip().splitlines()[-1]
    )
    assert Path(out["ours"]).is_relative_to(installed["site"] / "societas" / "agents"), out
    assert not Path(out["theirs"]).is_relative_to(installed["site"]), out
    assert Path(out["theirs"]).is_relative_to(sysconfig.get_paths()["purelib"]), out  # the SDK's own install
    assert out["their_agent"].startswith("agents."), out
    assert out["our_agent"].startswith("societas.agents."), out


def test_console_script_lists_every_command(installed):
    _with_dependencies(installed)
    exe = installed["venv"] / "bin" / "societas"
    out = _run([str(exe), "--help"], cwd=installed["work"]).stdout
    for command in (
        "show",
        "run",
        "solve",
        "table",
        "psro",
        "algos",
        "meta-solvers",
        "train",
        "evolve",
        "model",
    ):
        assert f" {command} " in out, f"`societas --help` does not list {command}:\n{out}"
    train = _run([str(exe), "train", "--help"], cwd=installed["work"]).stdout
    for command in ("comm", "routing", "conductor", "selfplay", "remul", "society"):
        assert f" {command} " in train, f"`societas train --help` does not list {command}:\n{train}"
    evolve = _run([str(exe), "evolve", "--help"], cwd=installed["work"]).stdout
    assert " run " in evolve and " report " in evolve


def _leaves(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@pytest.mark.parametrize("config_name", ["config.yaml", "demo.yaml"])
def test_installed_cfr_task_runs_with_its_own_config(installed, config_name):
    """A built-in task run from another directory is configured by the packaged file, not by defaults."""
    _with_dependencies(installed)
    task_dir = installed["site"] / "societas" / "evolve" / "tasks" / "cfr"
    exe = installed["venv"] / "bin" / "societas"
    out_dir = installed["work"] / f"runs-{config_name}"
    cmd = [
        str(exe),
        "evolve",
        "run",
        "cfr",
        "--iterations",
        "0",
        "--no-held-out",
        "--out",
        str(out_dir),
        "--json",
    ]
    if config_name == "demo.yaml":
        cmd[4:4] = ["--config", str(task_dir / config_name)]
    result = json.loads(_run(cmd, cwd=installed["work"]).stdout.strip().splitlines()[-1])
    assert result["evaluated"] == 1 and result["failed"] == 0, result
    resolved = _leaves(yaml.safe_load((Path(result["run_dir"]) / "config.yaml").read_text()))
    written = _leaves(yaml.safe_load((task_dir / config_name).read_text()))
    written.pop("max_iterations", None)  # overridden by --iterations 0
    assert written, f"{config_name} holds no settings"
    differing = {
        k: (v, resolved.get(k, "<missing>")) for k, v in written.items() if resolved.get(k, "<missing>") != v
    }
    assert not differing, f"settings of {config_name} not in force (file, resolved): {differing}"

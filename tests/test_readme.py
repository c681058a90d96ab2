"""Every Python block of the README runs as written, in order, in one namespace
(a later block may use what an earlier one defined, as a reader pasting them
would), in a temporary working directory, on the embedded model.

Only sizes change: each substitution below replaces a size literal of one
block (8,000 fewer training steps, fewer CFR iterations), and the test fails
if the text it replaces is no longer in the README, so the two stay together.
The cheap shell lines of the README run too (``--help`` of every command it
names, and the quick ones whole).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# (text in the README, what the test runs instead): sizes only.
SMALLER = {
    'tree = load_game("leduc_poker(players=3)")': 'tree = load_game("leduc_poker")',
    'CFRSolver(tree, "vad-cfr").run(1000)': 'CFRSolver(tree, "vad-cfr").run(50)',
    "batch=4).run(200)": "batch=4).run(20)",
    '"kuhn_poker", 20, train_solver="nash"': '"kuhn_poker", 3, train_solver="nash"',
    "total_steps=800_000": "total_steps=4_096",
    'make_env("speaker_listener", num_envs=4096': 'make_env("speaker_listener", num_envs=64',
    'n_personas=4, rounds=2, params={"max_new_tokens": 64}': 'n_personas=2, rounds=1, params={"max_new_tokens": 8}',
    "{max_messages: 12}": "{max_messages: 3}",
    'prompt: "Decide who acts next."}': 'prompt: "Decide who acts next.", params: {max_new_tokens: 24}}',
    'prompt: "Work out the numbers."}': 'prompt: "Work out the numbers.", params: {max_new_tokens: 24}}',
    "tools: [send_email, calculator]}": "tools: [send_email, calculator], params: {max_new_tokens: 48}}",
    'Conductor("embedded", max_turns=2)': 'Conductor("embedded", max_turns=1)',
}


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def shell_lines(text: str) -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        lines += [
            ln.split("  #")[0].strip() for ln in joined.splitlines() if ln.strip() and not ln.startswith("#")
        ]
    return lines


def test_every_substitution_is_still_in_the_readme():
    code = "\n".join(python_blocks(README.read_text()))
    missing = [old for old in SMALLER if old not in code]
    assert not missing, f"README no longer has {missing}: update SMALLER in {__file__}"


@pytest.mark.slow
def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch):
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for i, block in enumerate(blocks):
        code = block
        for old, new in SMALLER.items():
            code = code.replace(old, new)
        t0 = time.perf_counter()
        try:
            exec(compile(code, f"README.md python block {i + 1}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"README python block {i + 1} failed:\n{block}") from exc
        print(f"README python block {i + 1}: {time.perf_counter() - t0:.1f} s")
    # What the blocks promise to leave behind.
    assert (tmp_path / "society.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert namespace["r"].killed_by == "timeout"
    assert namespace["metrics"]["samples"] >= 1


def test_readme_shell_commands_exist():
    """Every ``societas`` or ``python`` command line of the README answers ``--help``
    (its sub-commands and positional arguments lead to a real command), without running it."""
    from typer.testing import CliRunner

    from societas.evolve.console import app

    checked = set()
    for line in shell_lines(README.read_text()):
        words = shlex.split(line)
        if not words or words[0] not in ("societas", "python"):
            continue
        lead = []
        for w in words[1:]:
            if w.startswith("-"):
                break
            lead.append(w)
        if (words[0], *lead) in checked:
            continue
        checked.add((words[0], *lead))
        if words[0] == "societas":  # in this process: the console script's own app
            r = CliRunner().invoke(app, [*lead, "--help"], env={"COLUMNS": "200"})
            assert r.exit_code == 0 and "Usage" in r.output, (line, r.output[-2000:])
        else:
            p = subprocess.run([sys.executable, *lead, "--help"], capture_output=True, text=True, cwd=ROOT)
            assert p.returncode == 0 and "usage" in p.stdout.lower(), (line, p.stderr[-2000:])
    assert len(checked) >= 10

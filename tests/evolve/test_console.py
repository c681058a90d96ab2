"""The ``societas`` console script mounts every layer's commands lazily: its help
lists them without importing torch, and what it lists is what the commands say."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
import typer.core
import typer.main
from typer.testing import CliRunner

from societas.evolve import console
from societas.marl.cli_common import MULTI_OPTIONS
from societas.marl.games import cli as games_cli
from societas.topology import cli as topology_cli


def _help(app, *args: str) -> str:
    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.output


def test_the_listing_from_the_table_is_the_listing_of_the_real_commands(monkeypatch):
    lazy = _help(console.app)
    monkeypatch.setattr(console.LazyGroup, "listing_from_table", False)  # import and ask every command
    assert lazy == _help(console.app)
    for name in console.COMMANDS:
        assert f" {name} " in lazy


def test_every_command_of_the_mounted_apps_is_in_the_table():
    ctx = typer.Context(typer.core.TyperGroup())
    merged = {
        name
        for app in (topology_cli.app, games_cli.app)
        for name in typer.main.get_group(app).list_commands(ctx)
    }
    assert merged | {"train", "evolve", "model"} == set(console.COMMANDS)


@pytest.mark.parametrize("args", [["--help"], []])
def test_the_help_imports_neither_torch_nor_transformers(args):
    code = (
        "import sys\n"
        f"sys.argv = ['societas', *{args!r}]\n"
        "from societas.evolve.console import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
        "print(code, sorted(m for m in ('torch', 'transformers', 'pyspiel') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "show" in r.stdout and "evolve" in r.stdout
    # with no command the help is shown and the exit status is click's for missing input
    assert r.stdout.strip().splitlines()[-1] == f"{0 if args else 2} []"


def test_a_command_runs_from_its_own_module_and_keeps_its_options():
    r = CliRunner().invoke(console.app, ["algos", "--json"])
    assert r.exit_code == 0, r.output
    assert "cfr+" in r.output
    r = CliRunner().invoke(console.app, ["solve", "--game", "kuhn_poker", "--iterations", "-1"])
    assert r.exit_code == 2 and "--iterations must be between 1 and" in r.output
    r = CliRunner().invoke(console.app, ["no-such-command"])
    assert r.exit_code == 2 and "No such command 'no-such-command'" in r.output


def test_a_table_entry_without_its_command_is_an_error(monkeypatch):
    monkeypatch.setitem(
        console.COMMANDS, "nope", console.Mounted("societas.topology.cli", "app", True, "not there")
    )
    with pytest.raises(LookupError, match="societas.topology.cli.app has no command 'nope'"):
        console.load_command("nope")


def _list_valued_options(command) -> dict[str, str]:
    found = {opt: p.help or "" for p in command.params if getattr(p, "multiple", False) for opt in p.opts}
    for sub in getattr(command, "commands", {}).values():
        found |= _list_valued_options(sub)
    return found


def test_every_list_valued_option_is_expanded_or_says_it_repeats():
    """``--algos a b c`` works because the console rewrites it as repeated flags: an option
    that takes several values is named in MULTI_OPTIONS, or its help says it is given once
    per value ('repeatable'); MULTI_OPTIONS names nothing else."""
    found: dict[str, str] = {}
    for name in console.COMMANDS:
        found |= _list_valued_options(console.load_command(name))
    assert set(MULTI_OPTIONS) <= set(found)
    assert {
        opt for opt, help in found.items() if opt not in MULTI_OPTIONS and "repeatable" not in help
    } == set()

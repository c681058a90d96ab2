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
from societas.marl import cli as marl_cli
from societas.marl.cli_common import MULTI_OPTIONS
from societas.marl.comm import cli as comm_cli
from societas.marl.games import cli as games_cli
from societas.marl.llm import cli as llm_cli
from societas.marl.llm.recipes import RECIPES
from societas.marl.routing import cli as routing_cli
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


@pytest.mark.parametrize("args", [[], ["train"]])
def test_the_marl_listings_from_their_tables_are_the_listings_of_the_real_commands(monkeypatch, args):
    lazy = _help(marl_cli.app, *args)
    for app in (marl_cli.app, marl_cli.train_app):
        monkeypatch.setattr(app.info.cls, "listing_from_table", False)
    assert lazy == _help(marl_cli.app, *args)
    table = marl_cli.TRAIN_COMMANDS if args else marl_cli.MARL_COMMANDS
    for name in table:
        assert f" {name} " in lazy


def test_every_training_command_is_in_the_table():
    assert marl_cli.RECIPE_NAMES == tuple(RECIPES)
    ctx = typer.Context(typer.core.TyperGroup())
    real = {
        name
        for app in (comm_cli.app, routing_cli.app, llm_cli.recipes_app)
        for name in typer.main.get_group(app).list_commands(ctx)
    }
    assert real == set(marl_cli.TRAIN_COMMANDS)


def test_every_command_of_the_mounted_apps_is_in_the_table():
    ctx = typer.Context(typer.core.TyperGroup())
    merged = {
        name
        for app in (topology_cli.app, games_cli.app)
        for name in typer.main.get_group(app).list_commands(ctx)
    }
    assert merged | {"train", "evolve", "model"} == set(console.COMMANDS)


def _heavy_imports(entry: str, line: list[str]) -> tuple[subprocess.CompletedProcess, str]:
    """Run ``entry``'s ``main`` on ``line`` in a fresh interpreter: the process, and a last
    line with the exit status and which of torch, transformers and pyspiel it imported."""
    module, prog = {"societas": ("societas.evolve.console", "societas"), "marl": ("societas.marl.cli", "m")}[
        entry
    ]
    code = (
        "import sys\n"
        f"sys.argv = [{prog!r}, *{line!r}]\n"
        f"from {module} import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
        "print(code, sorted(m for m in ('torch', 'transformers', 'pyspiel') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r, r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("args", [["--help"], []])
def test_the_help_imports_neither_torch_nor_transformers(args):
    r, last = _heavy_imports("societas", args)
    assert "show" in r.stdout and "evolve" in r.stdout
    # with no command the help is shown and the exit status is click's for missing input
    assert last == f"{0 if args else 2} []"


@pytest.mark.parametrize("line", [["train", "--help"], ["--help"], ["train", "nope"]])
def test_the_marl_help_and_its_errors_import_neither_torch_nor_transformers(line):
    r, last = _heavy_imports("marl", line)
    assert last == f"{2 if 'nope' in line else 0} []"
    if "nope" in line:
        assert "No such command 'nope'" in r.stderr


def test_the_model_path_imports_neither_torch_nor_transformers(embedded_dir):
    r, last = _heavy_imports("societas", ["model", "path"])
    assert r.stdout.strip().splitlines() == [str(embedded_dir), last] and last == "0 []"


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
    if isinstance(command, typer.core.TyperGroup):  # lazy groups list what they have not loaded yet
        ctx = typer.Context(command)
        for name in command.list_commands(ctx):
            found |= _list_valued_options(command.get_command(ctx, name))
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

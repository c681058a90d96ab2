"""Training recipes of the papers, each a :class:`~societas.marl.llm.loop.Recipe`.

- ``conductor`` — AgentConductor (arXiv 2602.17100): an orchestrator writes
  layered YAML topologies for HumanEval problems, frozen workers run them
  (:class:`ConductorRecipe`);
- ``selfplay`` — Dr. Zero (arXiv 2601.07055): proposer and solver trained
  against each other, HRPO for the proposer (:class:`SelfPlayRecipe`);
- ``remul`` — REMUL (arXiv 2602.16154): a speaker rewarded when frozen
  listeners continuing its cut reasoning reach its answer (:class:`RemulRecipe`);
- ``society`` — personas debate, rewarded by the accuracy of the aggregated
  answer (:class:`SocietyRecipe`).

Run one with ``python -m societas.marl train RECIPE`` (see :mod:`societas.marl.llm.cli`) or
``societas.marl.llm.loop.train(recipe, TrainConfig(...), out)``.

Each recipe's options are a pydantic model (:class:`ConductorConfig`,
:class:`SelfPlayConfig`, :class:`RemulConfig`, :class:`SocietyConfig`: every
field documented and bounded); a recipe is built from one, from a mapping, or
from keyword arguments, and a bad value raises
:class:`~societas.marl.llm.settings.SettingsError` naming the field
(``recipe.group_size: Input should be greater than or equal to 2``).
"""

from __future__ import annotations

from societas.marl.llm.recipes.conductor import ConductorConfig, ConductorRecipe
from societas.marl.llm.recipes.remul import RemulConfig, RemulRecipe
from societas.marl.llm.recipes.selfplay import SelfPlayConfig, SelfPlayRecipe
from societas.marl.llm.recipes.society import SocietyConfig, SocietyRecipe

RECIPES: dict[str, type[ConductorRecipe | RemulRecipe | SelfPlayRecipe | SocietyRecipe]] = {
    "conductor": ConductorRecipe,
    "remul": RemulRecipe,
    "selfplay": SelfPlayRecipe,
    "society": SocietyRecipe,
}

__all__ = [
    "RECIPES",
    "ConductorConfig",
    "ConductorRecipe",
    "RemulConfig",
    "RemulRecipe",
    "SelfPlayConfig",
    "SelfPlayRecipe",
    "SocietyConfig",
    "SocietyRecipe",
]

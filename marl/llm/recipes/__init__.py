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
"""

from __future__ import annotations

from societas.marl.llm.recipes.conductor import ConductorRecipe
from societas.marl.llm.recipes.remul import RemulRecipe
from societas.marl.llm.recipes.selfplay import SelfPlayRecipe
from societas.marl.llm.recipes.society import SocietyRecipe

RECIPES = {
    "conductor": ConductorRecipe,
    "remul": RemulRecipe,
    "selfplay": SelfPlayRecipe,
    "society": SocietyRecipe,
}

__all__ = ["RECIPES", "ConductorRecipe", "RemulRecipe", "SelfPlayRecipe", "SocietyRecipe"]

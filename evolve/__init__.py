"""societas.evolve — how algorithms are discovered.

AlphaEvolve-style search over algorithm code: a program database with
MAP-Elites islands, LLM and AST mutations, sandboxed cascade evaluation and
discovery tasks for CFR and PSRO. Filled by its own work items.
"""

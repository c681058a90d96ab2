"""Pack 26 circles in the unit square, maximising the sum of their radii.

An OpenEvolve-format task (``initial_program.py`` + ``evaluator.py`` +
``config.yaml``), the problem of AlphaEvolve's Appendix B (their best: a sum
of 2.635 for 26 circles). Run it with
``societas evolve run examples/circle_packing --llm none`` (or with an LLM).
The seed places a centre circle and two rings, then gives every circle the
largest radius that keeps the packing valid, shrinking overlapping pairs.
"""

import numpy as np


# EVOLVE-BLOCK-START
def construct_packing():
    """Centres (26 x 2) and radii (26) of circles inside the unit square, not overlapping."""
    n = 26
    centers = np.zeros((n, 2))
    centers[0] = [0.5, 0.5]
    inner, outer = 8, 17
    for i in range(inner):
        angle = 2.0 * np.pi * i / inner
        centers[1 + i] = [0.5 + 0.25 * np.cos(angle), 0.5 + 0.25 * np.sin(angle)]
    for i in range(outer):
        angle = 2.0 * np.pi * i / outer
        centers[1 + inner + i] = [0.5 + 0.42 * np.cos(angle), 0.5 + 0.42 * np.sin(angle)]
    centers = np.clip(centers, 0.02, 0.98)
    return centers, largest_radii(centers)


def largest_radii(centers):
    """Radii as large as the square's sides allow, then each overlapping pair scaled down."""
    radii = np.min(np.concatenate([centers, 1.0 - centers], axis=1), axis=1)
    for i in range(len(centers)):
        for j in range(i + 1, len(centers)):
            distance = float(np.linalg.norm(centers[i] - centers[j]))
            if radii[i] + radii[j] > distance:
                scale = distance / (radii[i] + radii[j])
                radii[i] *= scale
                radii[j] *= scale
    return radii


# EVOLVE-BLOCK-END

"""Evaluator of the circle-packing task, OpenEvolve's interface: ``evaluate(program_path)``.

``combined_score`` is the sum of the radii over 2.635 (AlphaEvolve's sum for
26 circles), so 1.0 matches it; an invalid packing (a circle outside the
square, two circles overlapping, a wrong shape) scores 0 and says why in the
artifacts, which the next prompt shows.
"""

import importlib.util

import numpy as np

N = 26
TARGET = 2.635
TOLERANCE = 1e-9


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    centers, radii = module.construct_packing()
    centers = np.asarray(centers, dtype=float)
    radii = np.asarray(radii, dtype=float)
    problem = _problem(centers, radii)
    if problem is not None:
        return {
            "metrics": {"combined_score": 0.0, "validity": 0.0, "sum_radii": 0.0},
            "artifacts": {"invalid": problem},
        }
    total = float(radii.sum())
    smallest = int(np.argmin(radii))
    return {
        "metrics": {"combined_score": total / TARGET, "validity": 1.0, "sum_radii": total},
        "artifacts": {
            "packing": f"sum of radii {total:.6f} ({total / TARGET:.2%} of {TARGET}); the smallest circle "
            f"is #{smallest}, radius {radii[smallest]:.4f} at ({centers[smallest, 0]:.3f}, "
            f"{centers[smallest, 1]:.3f})"
        },
    }


def _problem(centers, radii):
    if centers.shape != (N, 2) or radii.shape != (N,):
        return f"expected centres of shape ({N}, 2) and radii of shape ({N},), got {centers.shape} and {radii.shape}"
    if not (np.isfinite(centers).all() and np.isfinite(radii).all()):
        return "a centre or radius is not finite"
    if (radii < 0).any():
        return f"circle #{int(np.argmin(radii))} has a negative radius"
    low = (centers - radii[:, None]).min(axis=1)
    high = (centers + radii[:, None]).max(axis=1)
    outside = np.flatnonzero((low < -TOLERANCE) | (high > 1 + TOLERANCE))
    if outside.size:
        return f"circle #{int(outside[0])} reaches outside the unit square"
    gaps = np.linalg.norm(centers[:, None, :] - centers[None, :, :], axis=2) - radii[:, None] - radii[None, :]
    np.fill_diagonal(gaps, np.inf)
    i, j = np.unravel_index(np.argmin(gaps), gaps.shape)
    if gaps[i, j] < -TOLERANCE:
        return f"circles #{min(i, j)} and #{max(i, j)} overlap by {-gaps[i, j]:.3g}"
    return None

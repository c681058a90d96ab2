"""Curve fitting, an OpenEvolve-format task: evolve ``model(x)`` to match a hidden curve."""


# EVOLVE-BLOCK-START
def model(x):
    a = 1.0
    b = 0.0
    c = 0.0
    return a * x * x + b * x + c


# EVOLVE-BLOCK-END


def predict(xs):
    """Frozen harness the evaluator calls."""
    return [float(model(x)) for x in xs]

"""``python -m societas.evolve``: see :mod:`societas.evolve.cli`."""

from societas.evolve.cli import main

if __name__ == "__main__":
    main()

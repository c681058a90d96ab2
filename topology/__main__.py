"""``python -m societas.topology``: see :mod:`societas.topology.cli`."""

from societas.topology.cli import main

if __name__ == "__main__":
    main()

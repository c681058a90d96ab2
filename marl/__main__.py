"""``python -m societas.marl``: see :mod:`societas.marl.cli`."""

from societas.marl.cli import main

if __name__ == "__main__":
    main()

"""``python -m societas.marl.games``: see :mod:`societas.marl.games.cli`."""

from societas.marl.games.cli import main

if __name__ == "__main__":
    main()

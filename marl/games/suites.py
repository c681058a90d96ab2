"""The game suites of "Discovering Multiagent Learning Algorithms with LLMs"
(arXiv 2602.16928): four training games and four held-out games."""

TRAINING_GAMES = [
    "kuhn_poker(players=3)",
    "leduc_poker",
    "goofspiel(num_cards=4,imp_info=True,points_order=descending)",
    "liars_dice(dice_sides=5)",
]
HELD_OUT_GAMES = [
    "kuhn_poker(players=4)",
    "leduc_poker(players=3)",
    "goofspiel(num_cards=5,imp_info=True,points_order=descending)",
    "liars_dice(dice_sides=6)",
]
PAPER_GAMES = TRAINING_GAMES + HELD_OUT_GAMES

# Not from the paper: games for *selecting* among evolved programs, apart from
# the held-out games (which are only reported). Variants of the training
# families (more players, another card order, fewer die faces), plus Leduc
# poker itself: scored at the reporting horizon (``validation_iterations``,
# by default the held-out one) it tells how a program does on a two-round
# poker game when it has few iterations, which the 1000-iteration training
# fitness does not. Each is cheap enough to score often.
VALIDATION_GAMES = [
    "leduc_poker",
    "kuhn_poker(players=5)",
    "goofspiel(num_cards=4,imp_info=True,points_order=ascending)",
    "liars_dice(dice_sides=4)",
]

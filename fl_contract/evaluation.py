"""What every evaluation answer is made of, whatever the model scored (a segmentation network, an image
classifier): the task, the key prefix of its scores, and how a site says what it withheld."""

EVALUATION_TASK = "evaluate"
EVAL = "eval"
"""The split an evaluation job scores: every labelled case or image of the site's dataset (keys `eval_dice_tc`,
`eval_balanced_accuracy`, ...)."""
WITHHELD = "withheld"
"""FLModel meta of an answer: what the site did not send and why, in its words ({"case_rows": "..."})."""
CONFUSION = "confusion"
"""FLModel meta of a classifier's evaluation: {"classes": [...], "counts": rows of the true class, columns of the
predicted one, null where a cell holds fewer than the site's min_cases images}."""
GLOBAL_MODEL = "global"
"""A cross-site matrix's name of the federation's global model (a segmentation run's others are named by the site
that trained them; PLayer-FL's other is each site's personalised model)."""

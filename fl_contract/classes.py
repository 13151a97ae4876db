"""ISIC-2019 class lists: the ground-truth columns and the subsets the job kinds train on."""

ISIC_CLASSES = ("MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC", "UNK")
"""Ground-truth columns in file order; UNK is never set in the training set."""
TRAINING_CLASSES = ISIC_CLASSES[:8]
PLAYERFL_CLASSES = ("BCC", "BKL", "MEL", "NV")
"""The four-class subset of the PLayer-FL setup (also FedKT-CSD's default)."""

"""What an ISIC evaluation site sends about a classifier's predictions on its images, under its policy's
`min_cases`.

Balanced accuracy and macro-F1 (sklearn's, over the four classes) and the image count always leave, as a training
job's validation sends them. The confusion matrix (rows: the true class, columns: the predicted one) leaves with
every cell of fewer than `min_cases` images left empty (null) but zeros kept, and a class's recall and image count
only over at least `min_cases` images of it: a cell of one or two images is close to one patient's diagnosis. What
is withheld is named with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.metrics import balanced_accuracy_score, confusion_matrix, f1_score

from fl_contract.evaluation import CONFUSION, EVAL, WITHHELD


def class_key(name: str, what: str) -> str:
    """e.g. `eval_recall_mel`, `eval_images_nv`."""
    return f"{EVAL}_{what}_{name.lower()}"


def isic_release(y_true: np.ndarray, y_pred: np.ndarray, classes: Sequence[str],
                 min_cases: int) -> tuple[dict[str, float], dict[str, Any]]:
    """(metrics, meta) the site sends about `y_pred` against `y_true` (class indices into `classes`)."""
    truth, predicted = np.asarray(y_true, dtype=int), np.asarray(y_pred, dtype=int)
    if not truth.size:
        raise ValueError("no images of the job's classes to score")
    labels = list(range(len(classes)))
    metrics = {f"{EVAL}_images": float(truth.size),
               f"{EVAL}_balanced_accuracy": float(balanced_accuracy_score(truth, predicted)),
               f"{EVAL}_macro_f1": float(f1_score(truth, predicted, labels=labels, average="macro", zero_division=0))}
    counts = confusion_matrix(truth, predicted, labels=labels)
    withheld: dict[str, str] = {}
    for index, name in enumerate(classes):
        images = int(counts[index].sum())
        if images >= min_cases:
            metrics[class_key(name, "images")] = float(images)
            metrics[class_key(name, "recall")] = float(counts[index, index] / images)
        elif images:
            withheld[class_key(name, "recall")] = (f"{images} images of {name}, fewer than the policy's "
                                                   f"min_cases={min_cases}")
    small = int(((counts > 0) & (counts < min_cases)).sum())
    cells = [[int(n) if n == 0 or n >= min_cases else None for n in row] for row in counts]
    if small:
        withheld[CONFUSION] = f"{small} cells of fewer than min_cases={min_cases} images are left empty"
    meta: dict[str, Any] = {CONFUSION: {"classes": list(classes), "counts": cells}}
    if withheld:
        meta[WITHHELD] = withheld
    return metrics, meta

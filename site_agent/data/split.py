"""One seeded split for every data kind: a site's records (BraTS cases, ISIC images) cut into named parts.

Every job kind splits through here, so the same folder and seed give the same parts wherever they are computed:
the job, the privacy officer's export, a benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from site_agent.data.readers.reader import DataError

R = TypeVar("R")
_SUM_TOLERANCE = 1e-9


def split_records(
    records: Sequence[R], fractions: Mapping[str, float], seed: int, source: Path | str
) -> dict[str, list[R]]:
    """The records shuffled by `seed` and cut into the parts named in `fractions` (in [0, 1], summing to 1).

    Every part after the first takes `round(fraction * n)` records from the front of the shuffled order, in the
    order given, and at least one when its fraction is positive; the first part takes the rest, so it absorbs the
    rounding (and shrinks the largest other part if it would be empty). Parts keep the records' input order.
    Too few records to give every requested part one raise a `DataError` naming `source`, the site's folder.
    """
    _check_fractions(fractions)
    names = list(fractions)
    requested = [name for name in names if fractions[name] > 0]
    n = len(records)
    if n < len(requested):
        raise DataError(
            f"{source}: {n} usable record(s) cannot fill the parts {', '.join(requested)} with at least one each; "
            f"the site needs at least {len(requested)}"
        )
    counts = {name: max(1, round(fractions[name] * n)) if fractions[name] > 0 else 0 for name in names[1:]}
    keep_for_first = 1 if fractions[names[0]] > 0 else 0
    while sum(counts.values()) > n - keep_for_first:
        counts[max(counts, key=counts.__getitem__)] -= 1
    order = np.random.default_rng(seed).permutation(n)
    parts, start = {}, 0
    for name in names[1:]:
        parts[name] = order[start : start + counts[name]]
        start += counts[name]
    parts = {names[0]: order[start:], **parts}
    return {name: [records[i] for i in sorted(parts[name])] for name in names}


def _check_fractions(fractions: Mapping[str, float]) -> None:
    values = list(fractions.values())
    if (not values or not all(0.0 <= v <= 1.0 for v in values)
            or not math.isclose(sum(values), 1.0, abs_tol=_SUM_TOLERANCE)):
        raise ValueError(f"fractions {dict(fractions)}: give each part a share in [0, 1], all shares summing to 1")

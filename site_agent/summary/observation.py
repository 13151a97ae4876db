"""One case's or image's part in a data summary: the cell it falls in for every feature, its values for the
quantiles, and, kept at the site, the reader's message when a training job would refuse it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Observation:
    """`cells`: feature name -> cell (every feature of the data kind, `fl_contract.data_summary`); `values`: quantile
    name -> this case's value (a vector of voxel percentiles, or one number); `problem`: the reader's message, never
    sent (it names files)."""

    name: str
    cells: dict[str, str] = field(default_factory=dict)
    values: dict[str, np.ndarray | float] = field(default_factory=dict)
    problem: str = ""

    def refuse(self, reason: str, problem: str) -> None:
        """The first reason a training job would refuse the case is its status."""
        if "case_status" not in self.cells:
            self.cells["case_status"] = reason
            self.problem = problem

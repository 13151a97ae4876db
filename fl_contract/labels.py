"""BraTS label conventions: which label value is which tumour sub-region, and the region channels trained on.

Kept apart from the readers so that command-line parsers and metrics can name label maps without importing
MONAI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

REGIONS = ("TC", "WT", "ET")
"""Label channel order: tumour core, whole tumour, enhancing tumour (MONAI's BraTS convention)."""


@dataclass(frozen=True)
class LabelMap:
    """Which label value is the enhancing tumour; 1 (necrotic/non-enhancing core) and 2 (edema) are fixed in BraTS."""

    name: str
    enhancing: int
    NECROSIS: ClassVar[int] = 1
    EDEMA: ClassVar[int] = 2

    @property
    def values(self) -> frozenset[int]:
        return frozenset({0, self.NECROSIS, self.EDEMA, self.enhancing})


BRATS_2021 = LabelMap("brats2021", enhancing=4)
"""BraTS 2018-2021 and FeTS: 1 necrosis/core, 2 edema, 4 enhancing (the default)."""
BRATS_2023 = LabelMap("brats2023", enhancing=3)
"""BraTS 2023 onwards: 1 necrosis/core, 2 edema, 3 enhancing."""
LABEL_MAPS: Mapping[str, LabelMap] = {m.name: m for m in (BRATS_2021, BRATS_2023)}

"""What every data kind's MONAI pipeline shares: a site's `DataError` surfaces instead of MONAI's wrapper.

MONAI re-raises any error inside a transform as `RuntimeError("applying transform ...")`; the site's IT needs the
`DataError` underneath, which names the file or case and says what to do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from monai.data import Dataset

from site_agent.data.reader import DataError


@contextlib.contextmanager
def surface_data_errors() -> Iterator[None]:
    """Re-raise the `DataError` (which names the case's file) that MONAI wraps in "applying transform ..."."""
    try:
        yield
    except RuntimeError as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, DataError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from exc


class SiteDataset(Dataset):
    """A MONAI `Dataset` read lazily, whose items raise the site's `DataError` rather than MONAI's wrapper."""

    def _transform(self, index: int) -> Any:
        with surface_data_errors():
            return super()._transform(index)

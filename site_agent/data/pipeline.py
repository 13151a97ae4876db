"""What every data kind's MONAI pipeline shares: a site's `DataError` surfaces instead of MONAI's wrapper.

MONAI re-raises any error inside a transform as `RuntimeError("applying transform ...")`; the site's IT needs the
`DataError` underneath, which names the file or case and says what to do. The datasets below surface it wherever
a transform runs: when an item is read, and (`SiteCacheDataset`, `SitePersistentDataset`) when the cache is filled
up front.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from monai.data.dataset import CacheDataset, Dataset, PersistentDataset
from monai.utils.enums import TraceKeys

from site_agent.data.readers.reader import DataError


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

    def __getitem__(self, index: Any) -> Any:
        with surface_data_errors():
            return super().__getitem__(index)


class SiteCacheDataset(CacheDataset):
    """A MONAI `CacheDataset` that raises the site's `DataError` rather than MONAI's wrapper, both while filling
    its cache (at construction) and when an item beyond the cached fraction is read (`cache_rate` < 1)."""

    def set_data(self, data: Sequence[Any]) -> None:
        with surface_data_errors():
            super().set_data(data)

    def __getitem__(self, index: Any) -> Any:
        with surface_data_errors():
            return super().__getitem__(index)


class SitePersistentDataset(PersistentDataset):
    """A MONAI `PersistentDataset` (the deterministic prefix of the transforms cached as one file per item in
    `cache_dir`) that raises the site's `DataError`, fills its cache up front with `fill`, and reads its cache with
    `torch.load(weights_only=True)`: the transform trace MONAI stores names `TraceKeys`, a plain string enum, which
    is allowed explicitly rather than unpickling anything the folder holds."""

    def fill(self) -> None:
        """Read, validate and cache every item not cached yet, so a bad case fails now, not mid-round."""
        for item in self.data:
            self._cachecheck(item)

    def _cachecheck(self, item_transformed: Any) -> Any:
        with surface_data_errors(), torch.serialization.safe_globals([TraceKeys]):
            return super()._cachecheck(item_transformed)  # type: ignore[no-untyped-call]  # MONAI leaves it unannotated

    def __getitem__(self, index: Any) -> Any:
        with surface_data_errors():
            return super().__getitem__(index)

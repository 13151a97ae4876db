"""The one seeded split every data kind uses: deterministic by seed, disjoint parts covering every record, no empty
part."""

from __future__ import annotations

from pathlib import Path

import pytest

from site_agent.data.readers.reader import DataError
from site_agent.data.split import split_records

THREE_PARTS = {"train": 0.64, "val": 0.16, "test": 0.20}


def test_the_same_seed_gives_the_same_parts_and_another_seed_other_parts():
    # Prepare
    records = [f"case{i:02d}" for i in range(40)]

    # Execute
    first = split_records(records, THREE_PARTS, seed=7, source="site")
    again = split_records(records, THREE_PARTS, seed=7, source="site")
    other = split_records(records, THREE_PARTS, seed=8, source="site")

    # Assert
    assert first == again
    assert first != other


def test_parts_are_disjoint_cover_every_record_and_keep_its_order():
    # Prepare
    records = [f"img{i:03d}" for i in range(103)]

    # Execute
    parts = split_records(records, THREE_PARTS, seed=0, source="site")

    # Assert
    assert list(parts) == ["train", "val", "test"]
    assert {name: len(part) for name, part in parts.items()} == {"train": 66, "val": 16, "test": 21}
    assert sorted(r for part in parts.values() for r in part) == records
    assert all(part == sorted(part) for part in parts.values())


@pytest.mark.parametrize(
    ("n", "fractions", "sizes"),
    [
        (2, {"train": 0.1, "val": 0.9}, {"train": 1, "val": 1}),
        (3, THREE_PARTS, {"train": 1, "val": 1, "test": 1}),
        (4, {"statistics": 0.9, "holdout": 0.1}, {"statistics": 3, "holdout": 1}),
        (5, {"statistics": 1.0, "holdout": 0.0}, {"statistics": 5, "holdout": 0}),
    ],
)
def test_every_requested_part_gets_at_least_one_record(n, fractions, sizes):
    parts = split_records(list(range(n)), fractions, seed=3, source="site")

    assert {name: len(part) for name, part in parts.items()} == sizes


def test_too_few_records_are_refused_naming_the_folder():
    # Prepare
    folder = Path("/data/derm/site-2")

    # Execute
    with pytest.raises(DataError) as error:
        split_records(["only", "two"], THREE_PARTS, seed=0, source=folder)

    # Assert
    message = str(error.value)
    assert (message.startswith(f"{folder}: 2 usable record(s)") and "train, val, test" in message
            and "at least 3" in message)


@pytest.mark.parametrize("fractions", [{"train": 0.8, "val": 0.3}, {"train": 1.2, "val": -0.2}, {}])
def test_fractions_must_be_shares_summing_to_one(fractions):
    with pytest.raises(ValueError, match="summing to 1"):
        split_records(list(range(10)), fractions, seed=0, source="site")

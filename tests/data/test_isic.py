"""ISIC-2019 sites: official CSV formats, class subsets, FLamby centres, every bad row reported, the MONAI pipeline."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import monai.data
import numpy as np
import pytest
import torch
from data.malformed import claim_size
from monai.transforms import Compose, EnsureTyped, Resized, ScaleIntensityRanged
from torch.utils.data import DataLoader

from fl_contract.classes import ISIC_CLASSES, PLAYERFL_CLASSES, TRAINING_CLASSES
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.isic import (
    GROUND_TRUTH_CSV,
    IMAGE_FOLDER,
    MAX_IMAGE_PIXELS,
    METADATA_CSV,
    IsicImageReader,
    LoadIsicd,
    flamby_center,
    isic_dataset,
    read_isic_site,
    scan_isic_site,
)
from site_agent.data.readers.reader import DataError


def _site(tmp_path: Path, classes=PLAYERFL_CLASSES, n_images: int = 20, site_index: int = 1) -> Path:
    return write_isic_site(tmp_path / "site", site_index, n_sites=3, n_images=n_images, classes=classes, size=32,
                           seed=5)


def _truth(site: Path) -> list[dict[str, str]]:
    with (site / GROUND_TRUTH_CSV).open(newline="") as f:
        return list(csv.DictReader(f))


def _rewrite_truth(site: Path, rows: list[dict[str, str]]) -> None:
    with (site / GROUND_TRUTH_CSV).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["image", *ISIC_CLASSES])
        writer.writeheader()
        writer.writerows(rows)


def test_site_reads_back_labels_paths_and_lesion_ids(tmp_path):
    # Prepare
    site = _site(tmp_path)
    rows = _truth(site)

    # Execute
    records = read_isic_site(site, PLAYERFL_CLASSES, check_images=True)

    # Assert
    assert [r.image for r in records] == [row["image"] for row in rows]
    for record, row in zip(records, rows):
        assert row[record.diagnosis] == "1.0" and PLAYERFL_CLASSES[record.label] == record.diagnosis
        assert record.path.is_file() and record.path.parent.name == IMAGE_FOLDER
    assert any(r.path.name.endswith("_downsampled.jpg") for r in records)
    assert records[0].lesion_id == "SITE1_0000000"


def test_class_subset_reindexes_and_leaves_out_other_classes_with_a_count(tmp_path, caplog):
    # Prepare
    site = _site(tmp_path, classes=TRAINING_CLASSES, n_images=40)
    rows = _truth(site)
    in_subset = [row for row in rows if any(row[c] == "1.0" for c in ("MEL", "NV"))]

    # Execute
    with caplog.at_level(logging.INFO, logger="site_agent.data.isic"):
        records = read_isic_site(site, ("NV", "MEL"))

    # Assert
    assert len(records) == len(in_subset) > 0
    assert all((r.label, r.diagnosis) in {(0, "NV"), (1, "MEL")} for r in records)
    assert f"left out {len(rows) - len(in_subset)} rows" in caplog.text


def test_missing_image_is_an_error_or_a_counted_skip(tmp_path, caplog):
    # Prepare
    site = _site(tmp_path)
    records = read_isic_site(site, PLAYERFL_CLASSES)
    records[2].path.unlink()

    # Execute
    with pytest.raises(DataError) as error:
        read_isic_site(site, PLAYERFL_CLASSES)
    with caplog.at_level(logging.WARNING, logger="site_agent.data.isic"):
        kept = read_isic_site(site, PLAYERFL_CLASSES, on_error="skip")

    # Assert
    message = str(error.value)
    assert (GROUND_TRUTH_CSV in message and "line 4" in message and records[2].image in message
            and "image missing" in message)
    assert "on_error='skip'" in message
    assert len(kept) == len(records) - 1 and records[2].image not in {r.image for r in kept}
    assert "skipped 1 of 20 rows" in caplog.text


def test_rows_with_no_or_several_labels_are_reported(tmp_path):
    # Prepare
    site = _site(tmp_path)
    rows = _truth(site)
    for name in ISIC_CLASSES:
        rows[0][name] = "0.0"
    rows[1]["MEL"], rows[1]["NV"] = "1.0", "1.0"
    _rewrite_truth(site, rows)

    # Execute
    with pytest.raises(DataError) as error:
        read_isic_site(site, PLAYERFL_CLASSES)

    # Assert
    message = str(error.value)
    assert "2 of 20 rows" in message and "line 2" in message and "no label" in message
    assert "line 3" in message and "several labels" in message


def test_undecodable_image_is_named(tmp_path):
    # Prepare
    site = _site(tmp_path)
    broken = read_isic_site(site, PLAYERFL_CLASSES)[0].path
    broken.write_bytes(b"\xff\xd8 not a jpeg")

    # Execute
    with pytest.raises(DataError) as listing_error:
        read_isic_site(site, PLAYERFL_CLASSES, check_images=True)
    with pytest.raises(DataError) as load_error:
        IsicImageReader().read(broken)

    # Assert
    assert str(broken) in str(listing_error.value) and "does not decode" in str(listing_error.value)
    assert str(broken) in str(load_error.value)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("no_csv", "file not found"),
        ("no_column", "missing columns ['SCC']"),
        ("bad_value", "column NV is 'yes'"),
        ("duplicate", "listed twice"),
    ],
)
def test_csv_errors_name_the_file_and_problem(tmp_path, damage, expected):
    # Prepare
    site = _site(tmp_path)
    rows = _truth(site)
    if damage == "no_csv":
        (site / GROUND_TRUTH_CSV).unlink()
    elif damage == "no_column":
        text = (site / GROUND_TRUTH_CSV).read_text().replace(",SCC,", ",SCX,", 1)
        (site / GROUND_TRUTH_CSV).write_text(text)
    elif damage == "bad_value":
        rows[5]["NV"] = "yes"
        _rewrite_truth(site, rows)
    else:
        _rewrite_truth(site, rows + rows[:1])

    # Execute
    with pytest.raises(DataError) as error:
        read_isic_site(site, PLAYERFL_CLASSES)

    # Assert
    assert GROUND_TRUTH_CSV in str(error.value) and expected in str(error.value)


def test_metadata_is_optional_but_checked_when_present(tmp_path):
    # Prepare
    site = _site(tmp_path)
    (site / METADATA_CSV).write_text("image,age\nISIC_0100000,40\n")

    # Execute
    with pytest.raises(DataError) as error:
        read_isic_site(site, PLAYERFL_CLASSES)
    (site / METADATA_CSV).unlink()
    records = read_isic_site(site, PLAYERFL_CLASSES)

    # Assert
    assert METADATA_CSV in str(error.value) and "lesion_id" in str(error.value)
    assert len(records) == 20 and all(r.lesion_id is None for r in records)


def test_unknown_class_in_subset_is_refused(tmp_path):
    with pytest.raises(DataError, match="unknown classes \\['MELANOMA'\\]"):
        read_isic_site(_site(tmp_path), ("MELANOMA", "NV"))


def test_image_reader_gives_the_stored_pixels_channel_first(tmp_path):
    # Prepare
    path = read_isic_site(_site(tmp_path), PLAYERFL_CLASSES)[0].path

    # Execute
    image = IsicImageReader().read(path)

    # Assert
    assert image.array.shape == (3, 32, 32) and image.array.dtype == np.float32
    assert 0.0 <= image.array.min() and image.array.max() <= 255.0 and image.array.std() > 10.0


def test_pipeline_yields_float_images_of_the_configured_size_through_monai_transforms(tmp_path):
    # Prepare
    records = read_isic_site(_site(tmp_path), PLAYERFL_CLASSES)
    stored = IsicImageReader().read(records[0].path).array

    # Execute
    dataset = isic_dataset(records, image_size=24)
    native = isic_dataset(records[:1], image_size=32)[0]
    batch = next(iter(DataLoader(dataset, batch_size=4)))

    # Assert
    assert isinstance(dataset, monai.data.Dataset) and isinstance(dataset.transform, Compose)
    assert [type(t) for t in dataset.transform.transforms] == [LoadIsicd, Resized, ScaleIntensityRanged, EnsureTyped]
    assert batch["image"].shape == (4, 3, 24, 24) and batch["image"].dtype == torch.float32
    assert type(batch["image"]) is torch.Tensor and 0.0 <= batch["image"].min() and batch["image"].max() <= 1.0
    assert batch["label"].tolist() == [r.label for r in records[:4]] and batch["label"].dtype == torch.int64
    # at its stored size an image is not resampled
    assert torch.equal(native["image"], torch.from_numpy(stored) / 255.0)


def test_pipeline_names_an_image_that_does_not_decode(tmp_path):
    # Prepare
    records = read_isic_site(_site(tmp_path), PLAYERFL_CLASSES)
    records[2].path.write_bytes(b"\xff\xd8 not a jpeg")

    # Execute
    with pytest.raises(DataError) as error:
        isic_dataset(records, image_size=16)[2]

    # Assert
    assert str(records[2].path) in str(error.value) and "does not decode" in str(error.value)


@pytest.mark.parametrize(
    ("lesion_id", "source", "centre"),
    [("BCN_0000123", None, 0), ("HAM_0000118", "vidir_molemax", 1), ("HAM_0000118", "vidir_modern", 2),
     ("HAM_0002730", "rosendahl", 3), ("MSK4_0011169", None, 4), ("HAM_0001466", "vienna_dias", 5)],
)
def test_flamby_centres(lesion_id, source, centre):
    assert flamby_center(lesion_id, source) == centre


@pytest.mark.parametrize(
    ("lesion_id", "source", "expected"),
    [(None, None, "no lesion_id"), ("HAM_1", None, "HAM10000"), ("XYZ_1", None, "unknown prefix")],
)
def test_flamby_centre_errors(lesion_id, source, expected):
    with pytest.raises(DataError, match=expected):
        flamby_center(lesion_id, source)


@pytest.mark.parametrize(
    ("width", "height", "claimed"),
    [(60_000, 60_000, "3600000000 pixels"), (8_000, 7_000, "8000 x 7000 = 56000000 pixels")],
    ids=["beyond PIL's bomb limit", "beyond the agent's limit"],
)
def test_an_image_claiming_too_many_pixels_is_refused_by_name_before_decoding(tmp_path, width, height, claimed):
    # Prepare
    records = read_isic_site(_site(tmp_path), PLAYERFL_CLASSES)
    claim_size(records[1].path, width, height)

    # Execute
    with pytest.raises(DataError) as read_error:
        IsicImageReader().read(records[1].path)
    with pytest.raises(DataError) as pipeline_error:
        isic_dataset(records, image_size=16)[1]

    # Assert
    for error in (read_error, pipeline_error):
        message = str(error.value)
        assert message.startswith(str(records[1].path)) and "image too large" in message and claimed in message
        assert f"at most {MAX_IMAGE_PIXELS} pixels" in message and "Downscale it" in message


def test_a_ground_truth_csv_saved_by_excel_with_a_byte_order_mark_reads_like_the_original(tmp_path):
    # Prepare
    site = _site(tmp_path)
    expected = read_isic_site(site, PLAYERFL_CLASSES)
    truth = site / GROUND_TRUTH_CSV
    truth.write_bytes(b"\xef\xbb\xbf" + truth.read_bytes().replace(b"\n", b"\r\n"))

    # Execute
    records = read_isic_site(site, PLAYERFL_CLASSES)

    # Assert
    assert records == expected


def test_csvs_in_utf16_or_with_semicolons_and_decimal_commas_read_like_the_original(tmp_path):
    # Prepare: the ground truth as Excel's "Unicode text" (UTF-16, tabs); the metadata as a German Excel's CSV
    site = _site(tmp_path)
    expected = read_isic_site(site, PLAYERFL_CLASSES)
    truth, metadata = site / GROUND_TRUTH_CSV, site / METADATA_CSV
    truth.write_bytes(truth.read_text().replace(",", "\t").encode("utf-16"))
    metadata.write_text(metadata.read_text().replace(",", ";"))

    # Execute
    records = read_isic_site(site, PLAYERFL_CLASSES)
    truth.write_text(truth.read_text(encoding="utf-16").replace("\t", ";").replace(".", ","))
    with_decimal_commas = read_isic_site(site, PLAYERFL_CLASSES)

    # Assert
    assert records == expected and with_decimal_commas == expected


def test_a_metadata_csv_in_latin1_is_refused_naming_the_encoding_to_use(tmp_path):
    # Prepare
    site = _site(tmp_path)
    metadata = site / METADATA_CSV
    lines = metadata.read_text().splitlines()
    lines[3] = lines[3].replace("male", "mâle")
    metadata.write_bytes("\n".join(lines).encode("latin-1"))

    # Execute
    with pytest.raises(DataError) as error:
        read_isic_site(site, PLAYERFL_CLASSES)

    # Assert
    message = str(error.value)
    assert message.startswith(str(metadata)) and "not UTF-8 text (byte 0xe2 on line 4" in message
    assert "Save it as UTF-8" in message and "iconv -f WINDOWS-1252 -t UTF-8" in message


def test_every_unusable_row_is_listed_and_skippable(tmp_path, caplog):
    # Prepare: a value that is not one-hot, a duplicate row and a missing image
    site = _site(tmp_path)
    rows = _truth(site)
    rows[4]["NV"] = "0.5"
    (site / IMAGE_FOLDER / f"{rows[6]['image']}.jpg").unlink(missing_ok=True)
    (site / IMAGE_FOLDER / f"{rows[6]['image']}_downsampled.jpg").unlink(missing_ok=True)
    _rewrite_truth(site, rows + rows[:1])

    # Execute
    scan = scan_isic_site(site, PLAYERFL_CLASSES)
    with pytest.raises(DataError) as error:
        read_isic_site(site, PLAYERFL_CLASSES)
    kept = read_isic_site(site, PLAYERFL_CLASSES, on_error="skip")

    # Assert
    assert [(p.line, p.image) for p in scan.problems] == [
        (6, rows[4]["image"]), (8, rows[6]["image"]), (22, rows[0]["image"])
    ]
    assert "column NV is '0.5', expected 0.0 or 1.0" in scan.problems[0].reason
    assert "image missing" in scan.problems[1].reason and "listed twice (first on line 2)" in scan.problems[2].reason
    assert "3 of 21 rows cannot be used" in str(error.value) and len(kept) == len(scan.records) == 18


def test_an_unreadable_csv_is_refused_naming_the_access_to_give(tmp_path, monkeypatch):
    # Prepare: the file share denies the agent's account
    site = _site(tmp_path)
    truth = site / GROUND_TRUTH_CSV

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)

    # Execute
    with pytest.raises(DataError) as error:
        read_isic_site(site, PLAYERFL_CLASSES)

    # Assert
    assert str(error.value) == (f"{truth}: cannot be read (Permission denied); "
                                "give the agent's service account read access")

"""`site-agent isic-federation` on a synthetic ISIC-format folder whose lesion ids name FLamby's centres."""

import csv
import json

import pytest

from site_agent.cli import main as site_agent
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.isic import METADATA_CSV, read_isic_site
from site_agent.data.readers.reader import DataError
from site_agent.playerfl.federation import build_federation

# image i of the source: its lesion id prefix and, for HAM images, its HAM10000 source
LESIONS = [("BCN_", None), ("HAM_", "vidir_molemax"), ("HAM_", "vidir_modern"), ("HAM_", "rosendahl"),
           ("MSK4_", None), ("", None)]


@pytest.fixture
def source(tmp_path):
    folder = write_isic_site(tmp_path / "isic", 1, n_sites=1, n_images=90, classes=("BCC", "BKL", "MEL", "NV", "AK"),
                             alpha=5.0, size=16)
    with (folder / METADATA_CSV).open(newline="") as f:
        rows = list(csv.DictReader(f))
    ham = [["lesion_id", "image_id", "dataset"]]
    for i, row in enumerate(rows):
        prefix, ham_source = LESIONS[i % len(LESIONS)]
        row["lesion_id"] = f"{prefix}{i:07d}" if prefix else ""
        if ham_source:
            ham.append([row["lesion_id"], row["image"].removesuffix("_downsampled"), ham_source])
    with (folder / METADATA_CSV).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with (tmp_path / "HAM10000_metadata").open("w", newline="") as f:
        csv.writer(f).writerows(ham)
    return folder


def test_each_centre_becomes_a_site_folder_the_agent_reads_capped_and_four_class(source, tmp_path):
    out = tmp_path / "federation"

    code = site_agent(["isic-federation", "--source", str(source), "--out", str(out), "--ham-metadata",
                       str(tmp_path / "HAM10000_metadata"), "--cap", "6"])

    manifest = json.loads((out / "federation.json").read_text())
    assert code == 0
    assert [s["centre"] for s in manifest["sites"]] == ["BCN", "HAM_vidir_molemax", "HAM_vidir_modern", "HAM_rosendahl"]
    for site in manifest["sites"]:
        records = read_isic_site(out / site["site"])
        assert len(records) == site["images"] == 6 and site["left_out_by_cap"] > 0
        assert {r.diagnosis for r in records} <= {"BCC", "BKL", "MEL", "NV"}
        prefix = "BCN_" if site["centre"] == "BCN" else "HAM_"
        assert all(r.lesion_id.startswith(prefix) for r in records)


def test_the_same_seed_writes_the_same_sites(source, tmp_path):
    first = build_federation(source, tmp_path / "a", tmp_path / "HAM10000_metadata", cap=4, seed=3)
    again = build_federation(source, tmp_path / "b", tmp_path / "HAM10000_metadata", cap=4, seed=3)

    assert first == again
    assert [r.image for r in read_isic_site(tmp_path / "a" / "site-2")] == \
        [r.image for r in read_isic_site(tmp_path / "b" / "site-2")]


def test_ham_centres_need_the_ham10000_metadata(source, tmp_path):
    with pytest.raises(DataError, match="HAM10000 metadata"):
        build_federation(source, tmp_path / "out")

    sites = build_federation(source, tmp_path / "out", centres=("BCN", "MSK"), cap=100)

    assert [s.centre for s in sites] == ["BCN", "MSK"] and sites[0].left_out_by_cap == 0

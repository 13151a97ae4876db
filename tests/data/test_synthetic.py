"""Demo data generators: deterministic by seed, learnable contrast, non-IID sites, and the CLI."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
import pytest

from fl_contract.classes import PLAYERFL_CLASSES
from site_agent.data.brats_case import MODALITIES, discover_cases, read_datalist
from site_agent.data.demo import demo_cli
from site_agent.data.demo.label_skew import class_partition_counts, site_class_proportions
from site_agent.data.demo.synthetic_brats import synthetic_case, write_brats_site
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.isic import read_isic_site


def _digest(folder: Path) -> dict[str, str]:
    files = (p for p in sorted(folder.rglob("*")) if p.is_file())
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_brats_site_is_deterministic_by_seed(tmp_path):
    # Execute
    write_brats_site(tmp_path / "a", 2, 1, (16, 16, 16), seed=7)
    write_brats_site(tmp_path / "b", 2, 1, (16, 16, 16), seed=7)
    write_brats_site(tmp_path / "c", 2, 1, (16, 16, 16), seed=8)

    # Assert
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    assert len(_digest(tmp_path / "a")) == 4 * 16 + 2  # slices, label, datalist


def test_tumour_regions_have_learnable_modality_contrast():
    # Execute
    case = synthetic_case(1, 0, (32, 32, 32), seed=0)
    image, label = case.image, case.label
    mean = {(m, v): image[c][label == v].mean() for c, m in enumerate(MODALITIES) for v in (1, 2, 4)}
    brain = {m: np.median(image[c][(label == 0) & (image[c] > image[c].max() * 0.2)]) for c, m in enumerate(MODALITIES)}

    # Assert: enhancing rim brightest on T1ce, edema brightest on FLAIR, necrosis dark on T1ce and bright on T2
    assert mean["t1ce", 4] > 1.4 * max(mean["t1ce", 2], brain["t1ce"])
    assert mean["flair", 2] > 1.4 * brain["flair"]
    assert mean["t1ce", 1] < 0.6 * brain["t1ce"] and mean["t2", 1] > 1.5 * brain["t2"]
    assert all((label == v).sum() > 20 for v in (1, 2, 4))


def test_brats_sites_differ_in_scanner_and_tumour_size():
    # Execute
    cases = {site: [synthetic_case(site, i, (32, 32, 32)) for i in range(3)] for site in (1, 2)}
    brain_level = {site: np.mean([np.percentile(c.image[0], 90) for c in cs]) for site, cs in cases.items()}
    tumour_size = {site: np.mean([(c.label > 0).sum() for c in cs]) for site, cs in cases.items()}

    # Assert
    assert brain_level[2] > 1.2 * brain_level[1]
    assert tumour_size[1] > 1.5 * tumour_size[2]
    assert cases[1][0].slope != cases[2][0].slope


def test_isic_sites_are_deterministic_and_label_skewed(tmp_path):
    # Execute
    write_isic_site(tmp_path / "a", 1, 3, 30, size=24, seed=4)
    write_isic_site(tmp_path / "b", 1, 3, 30, size=24, seed=4)
    proportions = site_class_proportions(3, 4, alpha=0.3, seed=4)
    sites = [write_isic_site(tmp_path / f"s{s}", s, 3, 60, alpha=0.3, size=24, seed=4) for s in (1, 2, 3)]
    counts = [np.bincount([r.label for r in read_isic_site(site, PLAYERFL_CLASSES)], minlength=4) for site in sites]

    # Assert
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    np.testing.assert_allclose(proportions.sum(axis=1), 1.0)
    assert [int(np.argmax(c)) for c in counts] == [int(np.argmax(p)) for p in proportions]
    assert len({int(np.argmax(c)) for c in counts}) > 1


def test_class_partition_holds_every_class_equally_and_skews_each_over_the_sites(tmp_path):
    # Execute
    counts = class_partition_counts(3, 4, 90, alpha=0.3, seed=4)
    even = class_partition_counts(3, 4, 90, alpha=1000.0, seed=4)
    sites = [write_isic_site(tmp_path / f"s{s}", s, 3, 30, alpha=0.3, size=24, seed=4, partition="class")
             for s in (1, 2, 3)]
    read = np.array([np.bincount([r.label for r in read_isic_site(site, PLAYERFL_CLASSES)], minlength=4)
                     for site in sites])

    # Assert: the written labels are the counts; each class has 90 / 4 images (the first two one more), and small
    # alpha gathers each class at some site where large alpha spreads it evenly; site sizes differ
    np.testing.assert_array_equal(read, counts)
    assert counts.sum(axis=0).tolist() == even.sum(axis=0).tolist() == [23, 23, 22, 22]
    assert (counts.max(axis=0) >= 0.45 * counts.sum(axis=0)).all()
    assert (even.max(axis=0) < 0.45 * even.sum(axis=0)).all()
    assert len(set(counts.sum(axis=1).tolist())) > 1


def test_unknown_partition_is_refused_by_name(tmp_path):
    # Execute / Assert
    with pytest.raises(ValueError, match="partition 'sites' is not one of site, class"):
        write_isic_site(tmp_path / "s", 1, 3, 30, size=24, partition="sites")


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    demo_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_writes_brats_and_isic_sites(tmp_path, capsys):
    # Execute
    brats_rc = _cli(["demo-data", "brats", "--site-index", "1", "--out", str(tmp_path / "mri"), "--cases", "2",
                     "--size", "16", "--layout", "nifti", "--label-map", "brats2023"])
    isic_rc = _cli(["demo-data", "isic", "--site-index", "2", "--out", str(tmp_path / "derm"), "--images", "12",
                    "--size", "24"])
    skewed_rc = _cli(["demo-data", "isic", "--site-index", "3", "--out", str(tmp_path / "skew"), "--images", "12",
                      "--size", "24", "--partition", "class"])

    # Assert
    assert brats_rc == 0 and isic_rc == 0 and skewed_rc == 0
    skewed = len(read_isic_site(tmp_path / "skew", PLAYERFL_CLASSES))
    assert skewed == class_partition_counts(3, 4, 36, alpha=0.5)[2].sum()
    assert read_datalist(tmp_path / "mri" / "datalist.json") == discover_cases(tmp_path / "mri")
    assert (tmp_path / "mri" / "Site1_001" / "Site1_001_t1ce.nii.gz").is_file()
    assert len(read_isic_site(tmp_path / "derm", PLAYERFL_CLASSES)) == 12
    out = capsys.readouterr().out
    assert "wrote 2 nifti cases" in out and f"wrote {skewed} images" in out


def test_scanner_offset_stays_inside_the_head_so_the_normalisation_mask_is_the_brain():
    from site_agent.segmentation.data import normalise

    # Execute: the share of voxels NormalizeIntensityd(nonzero=True) normalises, per site
    covered = {}
    for site in (1, 2, 3, 4):
        case = synthetic_case(site, 0, (32, 32, 32))
        normalised = normalise()({"image": case.image})["image"]
        covered[site] = float(np.mean(normalised != 0))

    # Assert: the same head-sized mask at every site, whatever its scanner offset (2 and 3 once covered 100%)
    assert all(0.15 < share < 0.45 for share in covered.values()), covered
    assert max(covered.values()) - min(covered.values()) < 0.1, covered

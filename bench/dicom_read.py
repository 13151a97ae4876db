"""Benchmark: our DICOM series reader vs plain `pydicom.dcmread` + stack, and vs MONAI's `PydicomReader`.

All three read the same synthetic series (single-frame, uncompressed, 16-bit with rescale), interleaved in one run
so that disk cache and CPU state are shared; the table gives medians and ratios to plain pydicom. Our reader does
more than the baseline (grouping by series, geometric ordering, spacing checks, rescale to float32, affine); it
reads uncompressed 16-bit little-endian pixel data straight from the file bytes, and a second row shows it with
that fast path off. A second table reads the same volume as hospitals also store it (one Enhanced MR file made by
highdicom's legacy converter, plain and JPEG 2000; single-frame JPEG 2000 and JPEG-LS lossless), each against
pydicom's own decode of the same files.

    .venv/bin/python bench/dicom_read.py [--size 256 --slices 155 --repeats 7] [--write-readme]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import highdicom as hd
import monai
import numpy as np
import pydicom
from monai.data import PydicomReader
from pydicom.uid import UID, JPEG2000Lossless, JPEGLSLossless
from readme_section import write_section

from site_agent.data.demo.dicom_demo import SeriesIds, write_dicom_series
from site_agent.data.readers import dicom_series
from site_agent.data.readers.dicom_series import read_dicom_series

BASELINE = "plain pydicom (dcmread + stack)"


def plain_pydicom(folder: Path) -> np.ndarray:
    return np.stack([pydicom.dcmread(path).pixel_array for path in sorted(folder.iterdir())])


def ours(folder: Path) -> np.ndarray:
    return read_dicom_series(folder).array


def ours_pydicom_decoders(folder: Path) -> np.ndarray:
    """Our reader with its 16-bit little-endian fast path off: every slice through pydicom's decoders."""
    with mock.patch.object(dicom_series, "_NATIVE_LITTLE_ENDIAN", frozenset()):
        return read_dicom_series(folder).array


def monai_pydicom_reader(folder: Path) -> np.ndarray:
    reader = PydicomReader()
    return reader.get_data(reader.read(str(folder)))[0]


def write_series(folder: Path, size: int, slices: int) -> None:
    stored = np.random.default_rng(0).integers(0, 4096, (size, size, slices)).astype(np.uint16)
    affine = np.diag([-0.9375, -0.9375, 1.0, 1.0])
    write_dicom_series(folder, stored, affine, SeriesIds("1.2.3.1", "1.2.3.2", "1.2.3.3", "BENCH"), "T1",
                       slope=0.5, intercept=-10.0)


def write_compressed(source: Path, out: Path, syntax: UID) -> Path:
    """Every file of `source` re-encoded in `syntax` (pydicom's encoders: pylibjpeg-openjpeg, pyjpegls)."""
    out.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        ds = pydicom.dcmread(path)
        ds.compress(syntax)
        ds.save_as(out / path.name)
    return out


def write_enhanced(source: Path, out: Path, syntax: UID | None = None) -> Path:
    """The series of `source` as one Legacy Converted Enhanced MR file (highdicom), optionally compressed."""
    out.mkdir(parents=True)
    converted = hd.legacy.LegacyConvertedEnhancedMRImage([pydicom.dcmread(p) for p in sorted(source.iterdir())],
                                                         series_instance_uid="1.2.3.9", series_number=9,
                                                         sop_instance_uid="1.2.3.9.1", instance_number=1)
    if syntax is not None:
        converted.compress(syntax)
    converted.save_as(out / "enhanced.dcm")
    return out


def measure(
    folder: Path, repeats: int, readers: dict[str, Callable[[Path], np.ndarray]] | None = None
) -> dict[str, list[float]]:
    readers = readers or {
        BASELINE: plain_pydicom,
        "ours (read_dicom_series)": ours,
        "ours, fast path off (pydicom decoders)": ours_pydicom_decoders,
        "MONAI PydicomReader": monai_pydicom_reader,
    }
    for read in readers.values():  # warm the page cache and imports
        read(folder)
    times: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(repeats):
        for name, read in readers.items():
            start = time.perf_counter()
            read(folder)
            times[name].append(time.perf_counter() - start)
    return times


def encodings_table(source: Path, work: Path, repeats: int, size: int, slices: int) -> str:
    """Ours vs pydicom's own decode of the same files, per storage form; each pair interleaved in its own run."""
    forms = {
        "Enhanced MR, one multi-frame file, uncompressed": write_enhanced(source, work / "enhanced"),
        "Enhanced MR, one multi-frame file, JPEG 2000 lossless": write_enhanced(source, work / "enhanced_j2k",
                                                                                JPEG2000Lossless),
        "single-frame, JPEG 2000 lossless": write_compressed(source, work / "j2k", JPEG2000Lossless),
        "single-frame, JPEG-LS lossless": write_compressed(source, work / "jls", JPEGLSLossless),
    }
    expected = ours(source)
    lines = [
        f"The same {slices} slices of {size}x{size} as stored otherwise; {repeats} interleaved runs of each form's "
        "readers; pydicom's decode is `dcmread(f).pixel_array` of every file, stacked (no geometry); highdicom's "
        "`imread(f).get_volume()` places the frames as ours does.",
        "",
        "| storage | pydicom decode median (ms) | ours median (ms) | ratio to pydicom (median, min) "
        "| highdicom get_volume median (ms) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, folder in forms.items():
        np.testing.assert_array_equal(ours(folder), expected)
        readers: dict[str, Callable[[Path], np.ndarray]] = {BASELINE: plain_pydicom, "ours": ours}
        if name.startswith("Enhanced"):
            readers["highdicom"] = highdicom_volume
        times = measure(folder, repeats, readers)
        base, mine = statistics.median(times[BASELINE]), statistics.median(times["ours"])
        ratio_min = min(times["ours"]) / min(times[BASELINE])
        other = f"{statistics.median(times['highdicom']) * 1e3:.1f}" if "highdicom" in times else ""
        lines.append(f"| {name} | {base * 1e3:.1f} | {mine * 1e3:.1f} | {mine / base:.2f}x, {ratio_min:.2f}x "
                     f"| {other} |")
    return "\n".join(lines)


def highdicom_volume(folder: Path) -> np.ndarray:
    [path] = list(folder.iterdir())
    return np.asarray(hd.imread(path).get_volume(dtype=np.float32).array)


def table(times: dict[str, list[float]], size: int, slices: int, repeats: int) -> str:
    medians = {name: statistics.median(t) for name, t in times.items()}
    fastest = {name: min(t) for name, t in times.items()}
    base, base_min = medians[BASELINE], fastest[BASELINE]
    lines = [
        f"Series: {slices} slices of {size}x{size}, uint16, uncompressed; {repeats} interleaved runs each; "
        f"pydicom {pydicom.__version__}, MONAI {monai.__version__}, numpy {np.__version__}, "
        f"Python {platform.python_version()}, {platform.machine()}.",
        "",
        "| reader | median (ms) | median ratio to plain pydicom | min (ms) | min ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {name} | {medians[name] * 1e3:.1f} | {medians[name] / base:.2f}x "
        f"| {fastest[name] * 1e3:.1f} | {fastest[name] / base_min:.2f}x |"
        for name in times
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--slices", type=int, default=155)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--write-readme", action="store_true", help="replace the results table in bench/README.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "series"
        write_series(folder, args.size, args.slices)
        np.testing.assert_array_equal(ours(folder)[0].transpose(2, 1, 0), plain_pydicom(folder) * np.float32(0.5) - 10)
        text = table(measure(folder, args.repeats), args.size, args.slices, args.repeats)
        print(text)
        encodings = encodings_table(folder, Path(tmp), args.repeats, args.size, args.slices)
    print(encodings)
    if args.write_readme:
        write_section("dicom_read", text)
        write_section("dicom_read_encodings", encodings)


if __name__ == "__main__":
    main()

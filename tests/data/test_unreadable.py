"""Files a reader cannot open get their own messages: permissions, looping links, truncation, tiny photos."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PilImage

from site_agent.data.demo.dicom_demo import SeriesIds, write_dicom_series
from site_agent.data.isic import IsicImageReader
from site_agent.data.readers.dicom_series import read_dicom_series
from site_agent.data.readers.nifti import read_nifti, write_nifti
from site_agent.data.readers.reader import DataError

_NOBODY = 65534


def _series(folder: Path) -> list[Path]:
    stored = np.arange(4 * 3 * 5, dtype=np.uint16).reshape(4, 3, 5)
    return write_dicom_series(folder, stored, np.diag([-1.0, -1.0, 2.0, 1.0]), SeriesIds("1.2", "1.2.1", "1.2.2", "P"),
                              "T1")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user may enter (pytest's own tmp folders are the owner's only)."""
    folder = Path(tempfile.mkdtemp(prefix="unreadable-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def _error_as_other_user(read: Callable[[], object]) -> str:
    """The `DataError` message of `read()` run as a user who may not read the file: this process if it is not root
    (root reads everything), else a forked child switched to `nobody`."""
    if os.geteuid() != 0:
        with pytest.raises(DataError) as error:
            read()
        return str(error.value)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, report the message, never return into pytest
        message = "no DataError"
        try:
            os.setgid(_NOBODY)
            os.setuid(_NOBODY)
            read()
        except DataError as err:
            message = str(err)
        except BaseException as err:  # noqa: BLE001 - anything else is reported as the test's failure
            message = f"{type(err).__name__}: {err}"
        os.write(writer, message.encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as stream:
        message = stream.read().decode()
    os.waitpid(pid, 0)
    return message


def test_a_slice_this_user_may_not_read_says_so(shared_dir):
    # Prepare
    paths = _series(shared_dir / "series")
    (shared_dir / "series").chmod(0o755)
    for path in paths:
        path.chmod(0o644)
    paths[2].chmod(0o600)

    # Execute
    message = _error_as_other_user(lambda: read_dicom_series(shared_dir / "series"))

    # Assert
    assert message.startswith(f"{paths[2]}: cannot be read by this user (permission denied)")
    assert "read access" in message and "replace it" not in message


def test_a_nifti_file_this_user_may_not_read_says_so(shared_dir):
    # Prepare
    path = write_nifti(shared_dir / "t1.nii.gz", np.zeros((3, 3, 3), np.float32), np.eye(4))
    path.chmod(0o600)

    # Execute
    message = _error_as_other_user(lambda: read_nifti(path))

    # Assert
    assert message.startswith(f"{path}: cannot be read by this user (permission denied)")


def test_a_photo_this_user_may_not_read_says_so(shared_dir):
    # Prepare
    path = shared_dir / "lesion.jpg"
    PilImage.fromarray(np.zeros((32, 32, 3), np.uint8)).save(path)
    path.chmod(0o600)

    # Execute
    message = _error_as_other_user(lambda: IsicImageReader().read(path))

    # Assert
    assert message.startswith(f"{path}: cannot be read by this user (permission denied)")


def test_a_slice_that_is_a_looping_link_is_named(tmp_path):
    # Prepare
    paths = _series(tmp_path / "series")
    paths[1].unlink()
    paths[1].symlink_to(paths[1].name)

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    assert str(error.value) == (f"{paths[1]}: a symbolic link that loops or points to nothing; replace it with the "
                                "slice file itself")


@pytest.mark.parametrize("length", [132, 200, 300])
def test_a_truncated_slice_is_named_as_truncated(tmp_path, length):
    # Prepare: cut inside the file meta, where pydicom reads an empty dataset
    paths = _series(tmp_path / "series")
    paths[3].write_bytes(paths[3].read_bytes()[:length])

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    message = str(error.value)
    assert message.startswith(f"{paths[3]}: holds no DICOM data elements ({length} bytes)")
    assert "truncated" in message and "copy it again" in message


def test_a_photo_below_the_minimum_size_is_refused_and_the_minimum_is_a_parameter(tmp_path):
    # Prepare
    path = tmp_path / "tiny.png"
    PilImage.fromarray(np.zeros((1, 1, 3), np.uint8)).save(path)

    # Execute
    with pytest.raises(DataError) as error:
        IsicImageReader().read(path)
    accepted = IsicImageReader(min_side=1).read(path)

    # Assert
    assert str(error.value).startswith(f"{path}: image of 1 x 1 pixels, under the 16 pixels a side")
    assert accepted.array.shape == (3, 1, 1)

"""broker/durable_io.py's fsync helpers."""

from __future__ import annotations

import os

import pytest

from broker.durable_io import fsync_and_close


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_every_descriptor_is_fsynced_and_closed(tmp_path):
    fds = [os.open(tmp_path / f"f{i}", os.O_CREAT | os.O_WRONLY) for i in range(3)]
    fsync_and_close(fds)
    assert all(_closed(fd) for fd in fds)


def test_a_failed_fsync_still_closes_every_descriptor(tmp_path):
    reader, writer = os.pipe()  # fsync of a pipe fails (EINVAL)
    after = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY)
    with pytest.raises(OSError):
        fsync_and_close([reader, after])
    assert _closed(reader) and _closed(after)
    os.close(writer)

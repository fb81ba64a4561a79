"""Fixtures for the high-availability tests: a real etcd (skipped with one line where it is
not installed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.etcd_proc import EtcdCluster


@pytest.fixture
def etcd(tmp_path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path / "etcd", 1)
    (tmp_path / "etcd").mkdir()
    cluster.start()
    yield cluster
    cluster.stop()

"""tests/skipped_areas.py: a run ends with one line per wholly skipped area (issue 46: the
cluster tests skipped silently where etcdctl was missing). Runs pytest on a small tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_wholly_skipped_area_gets_one_line_and_a_partly_skipped_one_none(tmp_path):
    tests = tmp_path / "tests"
    (tests / "cluster").mkdir(parents=True)
    (tests / "ops").mkdir()
    (tests / "conftest.py").write_text(
        "from tests.skipped_areas import (  # noqa: F401\n"
        "    pytest_collection_finish, pytest_configure, pytest_terminal_summary)\n")
    (tests / "cluster" / "test_a.py").write_text(
        "import pytest\n"
        "def test_one():\n    pytest.skip('etcdctl not found')\n"
        "def test_two():\n    pytest.skip('etcdctl not found')\n")
    (tests / "ops" / "test_ui.py").write_text(
        "import pytest\n@pytest.fixture\ndef driver():\n    pytest.skip('no chromium')\n"
        "def test_page(driver):\n    pass\n")
    (tests / "ops" / "test_api.py").write_text(
        "import pytest\ndef test_ok():\n    pass\n"
        "def test_skipped():\n    pytest.skip('RabbitMQ only')\n")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "tests"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120).stdout
    assert "whole areas skipped" in out, out
    assert "tests/cluster/: all 2 tests skipped: etcdctl not found" in out, out
    assert "tests/ops/test_ui.py: its one test skipped: no chromium" in out, out
    assert "test_api.py: all" not in out and "tests/ops/: all" not in out, out

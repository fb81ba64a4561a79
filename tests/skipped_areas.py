"""A pytest plugin (loaded by tests/conftest.py) that says at the end of a run which whole
areas of the suite were skipped, one line each, so that a green local run cannot hide that,
say, high availability went untested because `etcdctl` is missing (issue 46).

An area is a directory of tests (tests/cluster) or, where only part of a directory skipped,
one module (tests/ops/test_ui.py); it is reported when every test in it that ran was
skipped, with the skip reasons."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

_KEY = pytest.StashKey["SkippedAreas"]()


class SkippedAreas:
    """Per test module: how many tests were collected, how many skipped and why."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.collected: Counter[Path] = Counter()
        self.skipped: Counter[Path] = Counter()
        self.reasons: dict[Path, Counter[str]] = defaultdict(Counter)
        self.ran: set[str] = set()  # nodeids whose call or skip was reported

    def module(self, nodeid: str) -> Path:
        return Path(nodeid.split("::", 1)[0])

    def record(self, report: pytest.TestReport) -> None:
        if report.nodeid in self.ran:
            return
        if report.skipped:
            self.ran.add(report.nodeid)
            path = self.module(report.nodeid)
            self.skipped[path] += 1
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.reasons[path][reason.removeprefix("Skipped: ")] += 1
        elif report.when == "call":
            self.ran.add(report.nodeid)

    def areas(self) -> list[tuple[str, int, Counter[str]]]:
        """(area, tests, reasons) for every wholly skipped area, directories first."""
        ran_by_dir: Counter[Path] = Counter()
        skipped_by_dir: Counter[Path] = Counter()
        for path, n in self.collected.items():
            ran_by_dir[path.parent] += n
            skipped_by_dir[path.parent] += self.skipped[path]
        out: list[tuple[str, int, Counter[str]]] = []
        whole_dirs = {d for d, n in ran_by_dir.items()
                      if n and skipped_by_dir[d] == n and d != Path("tests")}
        for d in sorted(whole_dirs):
            reasons: Counter[str] = Counter()
            for path in self.collected:
                if path.parent == d:
                    reasons.update(self.reasons[path])
            out.append((f"{d}/", ran_by_dir[d], reasons))
        for path, n in sorted(self.collected.items()):
            if path.parent not in whole_dirs and n and self.skipped[path] == n:
                out.append((str(path), n, self.reasons[path]))
        return out


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KEY] = SkippedAreas(Path(config.rootpath))


def pytest_collection_finish(session: pytest.Session) -> None:
    areas = session.config.stash[_KEY]
    for item in session.items:
        areas.collected[areas.module(item.nodeid)] += 1


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    areas = config.stash.get(_KEY, None)
    if areas is None:
        return
    for report in terminalreporter.stats.get("skipped", []):
        areas.record(report)
    found = areas.areas()
    if not found:
        return
    terminalreporter.section("whole areas skipped")
    for area, n, reasons in found:
        why = "; ".join(f"{r} ({c})" if len(reasons) > 1 else r for r, c in reasons.most_common())
        what = f"all {n} tests skipped" if n > 1 else "its one test skipped"
        terminalreporter.write_line(f"{area}: {what}: {why}", yellow=True)

"""tests/docs: the counts of doc blocks run and skipped, printed at the end of the session
(with the skip reasons grouped) so that a run shows what the docs test did not check."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

_COUNTS = pytest.StashKey["DocBlockCounts"]()


@dataclass
class DocBlockCounts:
    """Per file: blocks run, skipped, text; over all files: skip reason -> how many."""

    per_file: dict[str, Counter[str]] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)

    def add(self, name: str, counts: Counter[str]) -> None:
        self.per_file[name] = counts


@pytest.fixture(scope="session")
def doc_block_counts(request: pytest.FixtureRequest) -> DocBlockCounts:
    return request.config.stash.setdefault(_COUNTS, DocBlockCounts())


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    counts = config.stash.get(_COUNTS, None)
    if counts is None or not counts.per_file:
        return
    total: Counter[str] = Counter()
    for per in counts.per_file.values():
        total.update(per)
    write = terminalreporter.write_line
    terminalreporter.section("doc blocks")
    write(f"{total['ran']} ran (python blocks twice), {total['output']} outputs checked, "
          f"{total['skip']} skipped, {total['text']} text (not run) "
          f"in {len(counts.per_file)} files")
    for name, per in sorted(counts.per_file.items()):
        write(f"  {name}: {per['ran']} ran, {per['output']} outputs checked, "
              f"{per['skip']} skipped, {per['text']} text")
    for reason, n in counts.skipped.most_common():
        write(f"  skipped {n}: {reason}")

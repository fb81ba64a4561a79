"""Every command and code block in README.md and docs/*.md runs as written on a fresh
machine (issue 33 item 3.5). New pages under docs/ are picked up by themselves.

What happens to a fenced block, by its language and the marker on the line just before the
fence (`<!-- doc-test: WORD (reason) -->`, an HTML comment GitHub does not show):

- `sh` / `bash` / `shell`: run by `bash -e -o pipefail`; `python`: saved to a file and run by
  `python3` **twice**, against the same broker, as a reader who tries it again would (issue
  46). Each run must exit 0 within 60 s; whatever it left running is then ended.
- `<!-- doc-test: output -->` on a text block right after a block that ran: what the page
  says it prints. Each non-blank line must appear in that block's output, in order, on every
  run (`...` stands for anything).
- `<!-- doc-test: background -->` on a shell block that runs until stopped (a broker): it is
  started, the test waits for "ready to accept connections", the file's later blocks use
  it, and it gets SIGTERM after the file's last block.
- `<!-- doc-test: pytest -->` on a python block that is a test module: run by `python3 -m pytest`.
- `toml` is read by the broker's own `load_config`, `ini` (RabbitMQ's rabbitmq.conf) by the
  same, `json` by `json.loads`.
- no language, `text`: output or a diagram, not run.
- `<!-- doc-test: skip (reason) -->`: not run; a reason is required and is printed.
- `<!-- doc-test: needs (program ...) -->` on a shell block: run where every program named
  is on PATH, else skipped with that reason (chromium for a screenshot of the UI).

The fresh machine, per markdown file: an empty working directory; every port the blocks
name (5672, 15672, 5701, …) moved to a free one, the same within the file, and the defaults
moved with them (BROKER_PORT, BROKER_MANAGEMENT_TCP_PORT, BROKER_PROMETHEUS_TCP_PORT,
BROKERCTL_API), so `python3 -m broker` without flags, brokerctl without --api and a pika URL
naming 5672 still meet; `/tmp/` paths moved into the working directory; `python3`,
`brokerctl` and `pybroker` on PATH as `pip install -e .` leaves them (this checkout), and no
`python` (fresh Debian and Ubuntu have none). The docs assume the quick start's broker is
running unless a block starts its own, so one is started for a block that does not run
`python3 -m broker` (and follows no background block), and stopped for one that does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from doc_blocks import (
    Block,
    DocError,
    DocRun,
    blocks,
    doc_files,
    documented_ports,
    missing_output,
)

pytestmark = pytest.mark.usefixtures("embedded_only_module")

FILES = doc_files()


def _all_blocks() -> list[Block]:
    out: list[Block] = []
    for path in FILES:
        try:
            out += blocks(path)
        except DocError:
            pass  # test_markers reports it
    return out


PORTS = documented_ports(_all_blocks())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_markers(path: Path) -> None:
    """Every marker is one the test knows, every skip has a reason, every fence a language
    the test can treat."""
    blocks(path)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_doc_blocks_run(path: Path, tmp_path: Path, doc_block_counts) -> None:
    """Run the file's blocks in order (see the module docstring); every failure is reported
    with the block as run and its output."""
    doc = blocks(path)
    run = DocRun(path, tmp_path, PORTS)
    failures: list[str] = []
    counts: Counter[str] = Counter()
    outputs: list[str] = []  # of the last block run, one per run
    last: Block | None = None
    try:
        for block in doc:
            if block.kind == "output":
                counts["output"] += 1
                for n, out in enumerate(outputs, 1):
                    missing = missing_output(block.text, out)
                    if missing:
                        failures.append(f"{block.where}: run {n} of {last.where if last else '?'}"
                                        f" did not print {missing}:\n{out}")
                if not outputs:
                    failures.append(f"{block.where}: an output block follows no block that ran")
                continue
            outputs = []
            if block.kind in ("skip", "text"):
                counts[block.kind] += 1
                if block.kind == "skip":
                    doc_block_counts.skipped[block.skip_reason] += 1
                continue
            last = block
            try:
                outputs = run.run(block)
            except AssertionError as exc:
                failures.append(str(exc))
            counts["ran"] += 1
    finally:
        failures += run.close()
    doc_block_counts.add(path.name, counts)
    print(f"{path.name}: {counts['ran']} ran, {counts['skip']} skipped, "
          f"{counts['text']} text (not run), {counts['output']} outputs checked")
    assert not failures, "\n\n".join(failures)


# -- the harness itself ------------------------------------------------------------------


def _md(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def _failure(path: Path, tmp_path: Path) -> pytest.ExceptionInfo[AssertionError]:
    """Run the page's first block, which must fail; the failure."""
    run = DocRun(path, tmp_path, {5672, 15672, 15692})
    try:
        with pytest.raises(AssertionError) as err:
            run.run(blocks(path)[0])
    finally:
        run.close()
    return err


def test_a_skip_without_a_reason_is_refused(tmp_path):
    path = _md(tmp_path, "<!-- doc-test: skip -->\n```sh\ntrue\n```\n")
    with pytest.raises(DocError) as err:
        blocks(path)
    assert "needs a reason" in str(err.value)


def test_a_marker_must_sit_on_its_fence(tmp_path):
    path = _md(tmp_path, "<!-- doc-test: skip (why) -->\n\n```sh\ntrue\n```\n")
    with pytest.raises(DocError) as err:
        blocks(path)
    assert "just before a fence" in str(err.value)


def test_an_unmarked_block_that_fails_fails(tmp_path):
    path = _md(tmp_path, "```sh\necho about to fail; false\n```\n")
    err = _failure(path, tmp_path)
    assert "page.md:1 (sh): exit 1" in str(err.value)
    assert "about to fail" in str(err.value)


def test_ports_and_tmp_move_with_the_run(tmp_path):
    path = _md(tmp_path, "```sh\ncurl http://127.0.0.1:15672/ --data-dir /tmp/a\n```\n")
    run = DocRun(path, tmp_path, documented_ports(blocks(path)))
    text = run.rewrite(blocks(path)[0].text)
    assert "15672" not in text and f"127.0.0.1:{run.ports[15672]}/" in text
    assert f"{tmp_path}/tmp/a" in text
    run.close()


def test_a_python_block_runs_twice_and_a_second_failure_fails(tmp_path):
    path = _md(tmp_path, "```python\nimport pathlib, sys\np = pathlib.Path('ran-once')\n"
               "if p.exists(): sys.exit('already exists')\np.write_text('x')\n```\n")
    err = _failure(path, tmp_path)
    assert "exit 1 on its second run" in str(err.value) and "already exists" in str(err.value)


def test_an_output_block_is_checked_line_by_line():
    assert missing_output("0 b'a'\n...\n2 b'c'\n", "0 b'a'\n1 b'b'\n  2 b'c'  \n") == []
    assert missing_output("0 b'a'\n2 b'c'\n", "2 b'c'\n0 b'a'\n") == ["2 b'c'"]


def test_an_output_block_must_be_text(tmp_path):
    path = _md(tmp_path, "<!-- doc-test: output -->\n```python\nprint(1)\n```\n")
    with pytest.raises(DocError) as err:
        blocks(path)
    assert "is for text blocks" in str(err.value)


def test_a_block_that_prints_a_traceback_fails_though_it_exits_0(tmp_path):
    path = _md(tmp_path, "```sh\npython3 -c 'import json; json.loads(\"\")' || true\n```\n")
    err = _failure(path, tmp_path)
    assert "printed a traceback" in str(err.value)


def test_a_block_that_needs_a_missing_program_is_skipped_with_the_reason(tmp_path):
    path = _md(tmp_path, "<!-- doc-test: needs (sh no-such-program-here) -->\n```sh\ntrue\n```\n")
    block = blocks(path)[0]
    assert block.kind == "skip"
    assert block.skip_reason == "needs no-such-program-here (not installed here)"
    path = _md(tmp_path, "<!-- doc-test: needs (sh) -->\n```sh\ntrue\n```\n")
    assert blocks(path)[0].kind == "sh"

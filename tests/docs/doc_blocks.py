"""The fenced code blocks of README.md and docs/*.md, and how tests/docs runs them.

`blocks(path)` reads a markdown file into `Block`s: the fence's language, its text, its line
and the `<!-- doc-test: WORD (reason) -->` marker on the line just before the fence, if any.
`DocRun` runs one file's blocks in order on a machine the test makes look fresh (see
test_doc_commands.py for the rules); it starts processes in their own sessions and ends
them by their process-group id.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = {"sh", "bash", "shell"}
PYTHON = {"python", "py", "python3"}
TEXT = {"", "text", "txt", "console", "output", "log"}  # shown output, diagrams: not run
CONFIG = {"toml", "ini", "json"}
DIRECTIVES = {"skip", "background", "pytest", "output", "needs"}

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^`]*$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<word>[\w-]+)\s*(?:\((?P<reason>.*)\))?\s*-->\s*$")
_ANY_MARKER = re.compile(r"<!--\s*doc-test\b")
# where a number in a block is a port: after a colon (host:port, URLs), after a port flag or
# key, after a listener key; 1024..65535 only (so IP:127.0.0.1 and times are left alone)
_PORT_CONTEXT = re.compile(r"(?:(?<=:)|(?<=--port )|(?<=port=)|(?<=port = )|(?<=default=)"
                           r"|(?<=default = ))(\d{4,5})(?!\d)")
# a block that starts a broker process of its own (not brokerctl's `-m broker.ctl`)
_STARTS_BROKER = re.compile(r"(?:\bpython3? -m broker(?![.\w])|\bpybroker(?![-\w]))")
READY = "ready to accept connections"
DEFAULT_PORTS = {"port": 5672, "management": 15672, "prometheus": 15692}


@dataclass
class Block:
    """One fenced block: where it is, its language, its text, its marker."""

    path: Path
    line: int  # of the opening fence, from 1
    lang: str
    text: str
    directive: str = ""  # skip, background, pytest, output, needs, or "" (none)
    reason: str = ""  # the marker's (reason)

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    def missing_programs(self) -> list[str]:
        """For `needs (prog ...)`: the programs named that are not on PATH."""
        return [p for p in self.reason.split() if shutil.which(p) is None]

    @property
    def skip_reason(self) -> str:
        if self.directive == "needs":
            return f"needs {' '.join(self.missing_programs())} (not installed here)"
        return self.reason

    @property
    def kind(self) -> str:
        """text, config, skip, output (what the block before it prints), or how it runs:
        sh, python, pytest, background."""
        if self.directive in ("skip", "output"):
            return self.directive
        if self.directive == "needs" and self.missing_programs():
            return "skip"
        if self.lang in TEXT:
            return "text"
        if self.lang in CONFIG:
            return "config"
        if self.directive in ("background", "pytest"):
            return self.directive
        return "sh" if self.lang in SHELL else "python" if self.lang in PYTHON else "unknown"


class DocError(ValueError):
    """A markdown file whose markers the test cannot follow."""


def doc_files() -> list[Path]:
    """README.md and every docs/*.md, sorted: a new page is picked up without a change here."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of `path`, each with the marker of the line before it. DocError for
    a marker without a reason on skip, an unknown word, a marker not followed by a fence, an
    unknown language, or a directive on a block it does not fit."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    pending: tuple[int, str, str] | None = None  # a marker waiting for its fence
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        marker = _MARKER.match(line)
        if marker:
            pending = (i + 1, marker["word"], (marker["reason"] or "").strip())
            i += 1
            continue
        if _ANY_MARKER.search(line):
            raise DocError(f"{path.name}:{i + 1}: a doc-test marker is one line "
                           "`<!-- doc-test: WORD (reason) -->`")
        if fence is None:
            if pending is not None:
                raise DocError(f"{path.name}:{pending[0]}: a doc-test marker must be the line "
                               "just before a fence")
            i += 1
            continue
        indent, mark, lang = fence["indent"], fence["fence"], fence["lang"].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(mark)
                                      and lines[j].strip().strip(mark[0]) == ""):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        block = Block(path, i + 1, lang, "\n".join(body) + "\n")
        if pending is not None:
            _, block.directive, block.reason = pending
            _check_marker(block)
            pending = None
        if block.kind == "unknown":
            raise DocError(f"{block.where}: fence language {lang!r} is not one the test runs "
                           f"({sorted(SHELL | PYTHON | CONFIG | TEXT)}); mark it "
                           "`<!-- doc-test: skip (why) -->` or teach tests/docs/doc_blocks.py")
        out.append(block)
        i = j + 1
    if pending is not None:
        raise DocError(f"{path.name}:{pending[0]}: a doc-test marker must be the line just "
                       "before a fence")
    return out


def _check_marker(block: Block) -> None:
    if block.directive not in DIRECTIVES:
        raise DocError(f"{block.where}: unknown doc-test word {block.directive!r} "
                       f"(one of {sorted(DIRECTIVES)})")
    if block.directive == "skip" and not block.reason:
        raise DocError(f"{block.where}: `doc-test: skip` needs a reason: "
                       "`<!-- doc-test: skip (needs a RabbitMQ) -->`")
    if block.directive == "pytest" and block.lang not in PYTHON:
        raise DocError(f"{block.where}: `doc-test: pytest` is for python blocks")
    if block.directive == "background" and block.lang not in SHELL:
        raise DocError(f"{block.where}: `doc-test: background` is for shell blocks")
    if block.directive == "needs" and (block.lang not in SHELL or not block.reason):
        raise DocError(f"{block.where}: `doc-test: needs (program ...)` is for shell blocks "
                       "and names the programs")
    if block.directive == "output" and block.lang not in TEXT:
        raise DocError(f"{block.where}: `doc-test: output` is for text blocks (what the "
                       "block before it prints)")


def missing_output(expected: str, output: str) -> list[str]:
    """The lines of `expected` (an `output` block: what a page says its example prints)
    that are not in `output`, in order: each non-blank line must appear, whitespace at its
    ends aside, after the one before it; a line `...` stands for anything."""
    got = [line.strip() for line in output.splitlines()]
    missing: list[str] = []
    at = 0
    for want in (line.strip() for line in expected.splitlines()):
        if not want or want == "...":
            continue
        for i in range(at, len(got)):
            if got[i] == want:
                at = i + 1
                break
        else:
            missing.append(want)
    return missing


def documented_ports(all_blocks: list[Block]) -> set[int]:
    """Every port number the runnable blocks name (in a port's place: after a colon, a port
    flag or key), so that each is moved to a free port wherever it appears."""
    ports = {p for p in DEFAULT_PORTS.values()}
    for block in all_blocks:
        if block.kind in ("skip", "text"):
            continue
        ports.update(int(m) for m in _PORT_CONTEXT.findall(block.text)
                     if 1024 <= int(m) <= 65535)
    return ports


def free_port(taken: set[int]) -> int:
    """A port on 127.0.0.1 nothing listens on now, not one of `taken`."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            return port


class Proc:
    """A command in its own session (process group) with its output in a log file."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as fh:
            self.popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                          stdout=fh, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        self.pgid = self.popen.pid  # the session leader's id is the group's

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the log has the broker's ready line; AssertionError if it exits or times out."""
        deadline = time.monotonic() + timeout
        while READY not in self.output():
            if self.popen.poll() is not None:
                raise AssertionError(f"exited {self.popen.returncode} before it was ready:\n"
                                     + self.output())
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready within {timeout} s:\n" + self.output())
            time.sleep(0.05)

    def end_group(self, timeout: float = 30.0) -> None:
        """SIGTERM to every process of the group (what the block left running, or the
        background command itself), SIGKILL to what is left after `timeout`."""
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self._alive():
            if time.monotonic() > deadline:
                self._signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
            pass

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    def _alive(self) -> bool:
        self.popen.poll()  # reap the leader, so its zombie does not count
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        return True


class DocRun:
    """One markdown file's blocks, run in order in `workdir` with its own free ports."""

    def __init__(self, path: Path, workdir: Path, ports: set[int], timeout: float = 60.0) -> None:
        self.path = path
        self.workdir = workdir  # the blocks' cwd: files one block makes, the next one reads
        self.timeout = timeout  # seconds a block may take
        taken: set[int] = set()
        self.ports: dict[int, int] = {}  # documented port -> this run's free port
        for port in sorted(ports):
            self.ports[port] = free_port(taken)
            taken.add(self.ports[port])
        self._port_re = re.compile(r"(?<![\w.])(" + "|".join(map(str, sorted(ports)))
                                   + r")(?!\w)")
        (workdir / "tmp").mkdir()
        self.bin = workdir / "bin"
        self.bin.mkdir()
        self._shims()
        self.env = self._env()
        self.background: list[tuple[Block, Proc]] = []  # `doc-test: background` blocks, running
        self.default_broker: Proc | None = None  # the quick start's broker, when one runs
        self._n = 0  # numbers the logs and scripts in workdir

    # -- the machine the blocks see ---------------------------------------------------------
    def _shims(self) -> None:
        """`python3` (this interpreter), `brokerctl` and `pybroker` as pip installs them; no
        `python`: fresh Debian and Ubuntu machines have none."""
        scripts = {
            "python3": f'exec {sys.executable} "$@"\n',
            "brokerctl": f'exec {sys.executable} -m broker.ctl "$@"\n',
            "pybroker": f'exec {sys.executable} -m broker "$@"\n',
            "python": 'echo "python: command not found (a fresh Debian or Ubuntu has only '
                      'python3)" >&2; exit 127\n',
        }
        for name, body in scripts.items():
            shim = self.bin / name
            shim.write_text("#!/bin/sh\n" + body)
            shim.chmod(0o755)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("BROKER_", "BROKERCTL_", "RABBITMQ_", "PYTEST_"))}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(ROOT)  # what `pip install -e .` gives
        # the defaults of a fresh machine, moved with the ports: `python3 -m broker` without
        # flags, brokerctl without --api
        env["BROKER_PORT"] = str(self.ports[DEFAULT_PORTS["port"]])
        env["BROKER_MANAGEMENT_TCP_PORT"] = str(self.ports[DEFAULT_PORTS["management"]])
        env["BROKER_PROMETHEUS_TCP_PORT"] = str(self.ports[DEFAULT_PORTS["prometheus"]])
        env["BROKERCTL_API"] = f"http://127.0.0.1:{self.ports[DEFAULT_PORTS['management']]}"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def rewrite(self, text: str) -> str:
        """The block with its ports moved to this run's and /tmp/ moved into the workdir."""
        text = self._port_re.sub(lambda m: str(self.ports[int(m[1])]), text)
        return text.replace("/tmp/", f"{self.workdir}/tmp/")

    # -- running ------------------------------------------------------------------------------
    def run(self, block: Block) -> list[str]:
        """Run one block, a python block twice in a row against the same broker (a reader
        who tries an example again must not meet an error: a queue or stream that now
        exists, a message left over); its outputs, one a run. AssertionError (with the
        output) when a run fails."""
        kind = block.kind
        text = self.rewrite(block.text)
        if kind == "config":
            self._load_config(block, text)
            return []
        if kind == "background":
            self._stop_default_broker()
            proc = self._start(["bash", "-c", text], "background")
            self.background.append((block, proc))
            proc.wait_ready()
            return [proc.output()]
        runs = 2 if kind == "python" else 1
        return [self._run_once(block, kind, text, n) for n in range(1, runs + 1)]

    def _run_once(self, block: Block, kind: str, text: str, n: int) -> str:
        self._prepare_broker(block)
        if kind == "pytest":
            script = self.workdir / f"test_doc_block_{self._n}.py"
            script.write_text(text)
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    script.name]
        elif kind == "python":
            script = self.workdir / f"doc_block_{self._n}.py"
            script.write_text(text)
            argv = [sys.executable, script.name]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", text]
        proc = self._start(argv, kind)
        try:
            code = proc.popen.wait(self.timeout)
        except subprocess.TimeoutExpired:
            code = None
        proc.end_group()  # what it started in the background goes with it
        if code != 0:
            what = f"timed out after {self.timeout} s" if code is None else f"exit {code}"
            again = " on its second run" if n > 1 else ""
            raise AssertionError(f"{block.where} ({kind}): {what}{again}\n--- block as run:\n"
                                 f"{text}--- output:\n{proc.output()}")
        if "Traceback (most recent call last)" in proc.output():
            # a reader sees a traceback as a failure even when the block goes on (a wait loop
            # whose probe raised until the broker answered)
            raise AssertionError(f"{block.where} ({kind}): printed a traceback (run {n})\n"
                                 f"--- block as run:\n{text}--- output:\n{proc.output()}")
        return proc.output()

    def _start(self, argv: list[str], kind: str) -> Proc:
        self._n += 1
        return Proc(argv, self.workdir, self.env, self.workdir / f"block-{self._n}-{kind}.log")

    def _load_config(self, block: Block, text: str) -> None:
        from broker.config import load_config

        if block.lang == "json":
            json.loads(text)
            return
        name = "rabbitmq.conf" if block.lang == "ini" else "broker.toml"
        path = self.workdir / f"{self._n}-{name}"
        self._n += 1
        path.write_text(text)
        try:
            load_config(["--config", str(path)], environ={})
        except (ValueError, OSError) as exc:
            raise AssertionError(f"{block.where} ({block.lang}): {exc}") from exc

    def _prepare_broker(self, block: Block) -> None:
        """The docs assume the quick start's broker is running, unless a block starts its
        own: one that runs `python3 -m broker` gets none (it would hold the ports); any other
        gets the background block's broker if one runs, else a `python3 -m broker`."""
        if any(proc.popen.poll() is None for _, proc in self.background):
            return
        if _STARTS_BROKER.search(block.text):
            self._stop_default_broker()
            return
        if self.default_broker is None:
            proc = self._start([sys.executable, "-m", "broker"], "default-broker")
            self.default_broker = proc
            proc.wait_ready()

    def _stop_default_broker(self) -> None:
        if self.default_broker is not None:
            self.default_broker.end_group()
            self.default_broker = None

    def close(self) -> list[str]:
        """Stop what still runs; the complaints about background blocks that did not stop
        cleanly (a traceback in their output)."""
        problems = []
        self._stop_default_broker()
        for block, proc in self.background:
            proc.end_group()
            if "Traceback" in proc.output():
                problems.append(f"{block.where} (background): a traceback:\n{proc.output()}")
        self.background = []
        return problems

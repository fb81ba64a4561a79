"""The `workers` setting (broker/config.py, issue 47 item 1): from the command line, the
environment and a config file; `auto` is the cores this process may run on; what several
workers cannot do yet is refused at start with a clear error (exit 78 from
`python -m broker`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from broker.config import load_config


def test_workers_from_the_command_line_the_environment_and_auto():
    assert load_config(["--workers", "3"], environ={}).workers == 3
    assert load_config([], environ={"BROKER_WORKERS": "2"}).workers == 2
    assert load_config(["--workers", "auto"], environ={}).workers == len(
        os.sched_getaffinity(0))
    assert load_config([], environ={}).workers == 1


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_a_bad_count_is_refused(value):
    with pytest.raises(ValueError, match="workers must be"):
        load_config(["--workers", value], environ={})


@pytest.mark.parametrize("setting, what", [
    ("confirm_on=ack-lite", "confirm_on = ack-lite"),
])
def test_what_several_workers_cannot_do_yet_is_refused(setting, what):
    with pytest.raises(ValueError, match=f"workers > 1 with {what} is not supported yet"):
        load_config(["--workers", "2", "--set", setting], environ={})
    load_config(["--workers", "1", "--set", setting], environ={})  # one process: fine


def test_python_m_broker_exits_78_and_says_why(tmp_path):
    out = subprocess.run([sys.executable, "-m", "broker", "--workers", "2", "--data-dir",
                          str(tmp_path), "--set", "confirm_on=ack-lite"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 78
    assert "workers > 1 with confirm_on = ack-lite is not supported yet" in out.stderr

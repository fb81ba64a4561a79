"""`python -m bench -h` (and the subcommands' -h) print help: a '%' in a help string once
crashed argparse's formatting."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv", [["-h"], ["compare", "-h"], ["plot", "-h"]])
def test_help_works(argv):
    out = subprocess.run([sys.executable, "-m", "bench", *argv], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout

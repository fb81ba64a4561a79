"""`python -m build` makes a wheel that installs into a fresh venv, where the console script
runs and the README's fixture example passes with only the plugin's entry point loading it."""

from __future__ import annotations

import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_installs_and_runs_the_readme_example(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--wheel", "-o", str(tmp_path / "dist"),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("pybroker_amqp-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # the test environment's site-packages (a virtualenv's or the system's: venv's
    # --system-site-packages would give the base interpreter's, not a virtualenv's) supply
    # pika and pytest, after the new venv's own, so the wheel's copy of the broker comes
    # first on sys.path (a .pth line adds a directory without running its .pth files, so
    # an editable install of this checkout stays out)
    venv_site = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                               check=True, capture_output=True, text=True).stdout.strip()
    outer = [p for p in (*site.getsitepackages(), site.getusersitepackages())
             if Path(p).is_dir()]
    (Path(venv_site) / "test-environment.pth").write_text("\n".join(outer) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    where = subprocess.run([str(py), "-c", "import broker, pybroker_pytest; "
                            "print(broker.__file__); print(pybroker_pytest.__file__)"],
                           check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert str(ROOT) not in where and str(venv) in where
    help_ = subprocess.run([str(venv / "bin" / "pybroker"), "--help"], check=True,
                           capture_output=True, text=True, timeout=60).stdout
    assert "python -m broker" in help_
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Use it in your tests"):]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    work = tmp_path / "work"
    work.mkdir()
    (work / "test_readme.py").write_text(example)
    (work / "pytest.ini").write_text("[pytest]\n")
    res = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=work,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 passed" in res.stdout

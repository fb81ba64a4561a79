"""What the Celery tests share: the environment a worker subprocess and the test's own app
read their settings from, and importing an app module from this directory."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def celery_env(values: dict[str, str]) -> Iterator[dict[str, str]]:
    """os.environ with `values` while the block runs (restored after); yields the
    environment for a worker subprocess (this directory on its PYTHONPATH)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield dict(os.environ,
                   PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def import_app(name: str) -> ModuleType:
    """Import the app module `name` from this directory (as the worker does)."""
    sys.path.insert(0, str(HERE))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(HERE))

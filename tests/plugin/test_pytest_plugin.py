"""The pytest plugin (`pybroker_pytest`), run the way a user runs it: pytest in a subprocess
on test files that only use the plugin's fixtures."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pytest_fixture" / "test_example.py"


def run_pytest(tmp_path: Path, *args: str, files: dict[str, str] | None = None):
    """pytest in `tmp_path` with only this plugin loaded (autoload off, so the result does
    not depend on which entry points this environment has); returns CompletedProcess."""
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("BROKER_TEST_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "pybroker_pytest", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_readme_example_passes(tmp_path):
    (tmp_path / "test_example.py").write_text(EXAMPLE.read_text())
    res = run_pytest(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "5 passed" in res.stdout


def test_amqp_url_vhost_is_deleted_after_the_test(tmp_path):
    res = run_pytest(tmp_path, files={"test_vh.py": """
        import os
        import urllib.parse
        import pika

        seen = {}

        def test_uses_a_vhost(amqp_url, amqp_broker):
            seen["vhost"] = urllib.parse.unquote(urllib.parse.urlsplit(amqp_url).path[1:])
            assert seen["vhost"].startswith("test-")
            assert seen["vhost"] in amqp_broker.embedded.broker.vhosts
            seen["root"] = amqp_broker.embedded.broker.vhosts[seen["vhost"]].stores.root
            with pika.BlockingConnection(pika.URLParameters(amqp_url)) as c:
                c.channel().queue_declare("kept", durable=True)
            assert os.path.isdir(seen["root"])

        def test_it_is_gone_afterwards(amqp_broker):
            b = amqp_broker.embedded.broker
            assert seen["vhost"] not in b.vhosts
            names = amqp_broker.embedded.call(lambda: [v.name for v in b.definitions.list_vhosts()])
            assert seen["vhost"] not in names
            assert not os.path.exists(seen["root"])
    """})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 passed" in res.stdout


def test_amqp_url_option_points_at_an_external_broker(tmp_path, broker):
    """--amqp-url: amqp_url is that URL, no broker is started, the factory skips."""
    res = run_pytest(tmp_path, "--amqp-url", broker.url, files={"test_ext.py": f"""
        def test_url(amqp_url, amqp_broker):
            assert amqp_url == {broker.url!r}
            assert amqp_broker.embedded is None

        def test_factory_skips(amqp_broker_factory):
            raise AssertionError("not reached")
    """})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 passed, 1 skipped" in res.stdout


def test_broker_port_option(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = run_pytest(tmp_path, "--amqp-broker-port", str(port), files={"test_port.py": f"""
        def test_port(amqp_broker):
            assert amqp_broker.port == {port}
    """})
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.skipif(not importlib.metadata.entry_points(group="pytest11",
                                                        name="pybroker_amqp"),
                    reason="package not installed (pip install -e .)")
def test_installed_package_registers_the_plugin():
    (ep,) = importlib.metadata.entry_points(group="pytest11", name="pybroker_amqp")
    assert ep.value == "pybroker_pytest"

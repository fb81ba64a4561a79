"""Experiment launcher for the s2 recheck (issue 36): run `python -m broker` with the cyclic
collector off and/or with the event loop kept polling (a callback that reschedules itself,
so epoll never sleeps). Usage: python exp_broker.py [--gc-off] [--spin] -- BROKER ARGS
(run from the repository's root)."""

import asyncio
import gc
import os
import runpy
import sys

sys.path.insert(0, os.getcwd())
args = sys.argv[1:]
sep = args.index("--")
flags, rest = args[:sep], args[sep + 1:]
if "--gc-off" in flags:
    gc.disable()
    gc.collect = lambda *a, **k: 0  # the pacer's explicit passes too
if "--spin" in flags:
    import uvloop

    real_run = uvloop.run

    def run(coro, **kw):
        async def wrapper():
            loop = asyncio.get_running_loop()

            def spin():
                loop.call_soon(spin)

            loop.call_soon(spin)
            return await coro

        return real_run(wrapper(), **kw)

    uvloop.run = run
sys.argv = ["broker", *rest]
runpy.run_module("broker", run_name="__main__", alter_sys=True)

"""Experiment launcher: python /tmp/exp_broker.py [--gc-off] [--spin] -- BROKER ARGS"""
import asyncio, gc, os, runpy, sys
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

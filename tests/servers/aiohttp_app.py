"""An aiohttp application run with web.run_app, as its users start one;
the servers suite runs it as `python -m mt_asyncio aiohttp_app.py PORT`.
Its on_shutdown hook records a graceful stop in $SERVERS_MARKER."""

import asyncio
import os
import sys
import threading

from aiohttp import web


async def info(request):
    loop = asyncio.get_running_loop()
    return web.json_response({"loop": f"{type(loop).__module__}.{type(loop).__qualname__}",
                              "pid": os.getpid(), "thread": threading.get_native_id()})


async def cpu(request):
    total = 0
    for i in range(int(request.match_info["n"])):
        total += i * i
    return web.json_response({"pid": os.getpid(), "thread": threading.get_native_id(),
                              "total": total})


async def on_shutdown(app):
    marker = os.environ.get("SERVERS_MARKER")
    if marker:
        with open(marker, "a") as f:
            f.write(f"shutdown {os.getpid()}\n")


def make_app():
    app = web.Application()
    app.add_routes([web.get("/info", info), web.get("/cpu/{n}", cpu)])
    app.on_shutdown.append(on_shutdown)
    return app


if __name__ == "__main__":
    web.run_app(make_app(), host="127.0.0.1", port=int(sys.argv[1]), print=None)

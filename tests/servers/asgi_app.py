"""The FastAPI application the servers suite serves with uvicorn,
hypercorn and gunicorn: it says which loop and thread ran each request,
burns CPU on request, and records its lifespan's shutdown in the file
$SERVERS_MARKER (a graceful stop runs it)."""

import asyncio
import contextlib
import os
import threading

from fastapi import FastAPI


@contextlib.asynccontextmanager
async def lifespan(app):
    yield
    marker = os.environ.get("SERVERS_MARKER")
    if marker:
        with open(marker, "a") as f:
            f.write(f"shutdown {os.getpid()}\n")


app = FastAPI(lifespan=lifespan)


@app.get("/info")
async def info():
    loop = asyncio.get_running_loop()
    return {"loop": f"{type(loop).__module__}.{type(loop).__qualname__}",
            "pid": os.getpid(), "thread": threading.get_native_id()}


@app.get("/cpu/{n}")
async def cpu(n: int):
    total = 0
    for i in range(n):
        total += i * i
    return {"pid": os.getpid(), "thread": threading.get_native_id(), "total": total}

"""Helpers the network scenarios share: servers that clean up after
themselves, recording protocols, bounded waits."""

import contextlib

# Every wait in a network scenario is bounded: a hang fails, it does not
# stall the suite.
TIMEOUT = 10


def port_of(server):
    return server.sockets[0].getsockname()[1]


@contextlib.asynccontextmanager
async def serving(aio, handler, host="127.0.0.1", **kwargs):
    """An asyncio.start_server that is closed (and waited for) on exit."""
    server = await aio.start_server(handler, host, 0, **kwargs)
    try:
        yield server
    finally:
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)


async def echo_handler(reader, writer):
    """Echoes until EOF, then closes."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
        await writer.wait_closed()


async def close_writer(aio, writer):
    writer.close()
    await aio.wait_for(writer.wait_closed(), TIMEOUT)


def make_recorder(aio):
    """A Protocol class that logs its callbacks in order and resolves
    `done` at connection_lost."""

    class Recorder(aio.Protocol):
        def __init__(self):
            self.log = []
            self.data = bytearray()
            self.transport = None
            loop = aio.get_running_loop()
            self.made = loop.create_future()
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport
            self.log.append("made")
            self.made.set_result(None)

        def data_received(self, data):
            if not self.log or self.log[-1] != "data":
                self.log.append("data")
            self.data += data

        def eof_received(self):
            self.log.append("eof")

        def connection_lost(self, exc):
            self.log.append(("lost", type(exc).__name__ if exc else None))
            if not self.done.done():
                self.done.set_result(None)

    return Recorder

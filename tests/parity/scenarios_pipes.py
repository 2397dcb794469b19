"""Scenarios: loop.connect_read_pipe() / connect_write_pipe() over os.pipe()
(and a socketpair), with the transports' flow control."""

import os
import socket
import tempfile

from harness import aobserve, observe, scenario

TIMEOUT = 10


def _recorder(aio, loop):
    class Recorder(aio.Protocol):
        def __init__(self):
            self.events = []
            self.data = bytearray()
            self.lost = loop.create_future()

        def connection_made(self, transport):
            self.events.append("connection_made")

        def data_received(self, data):
            self.data += data

        def eof_received(self):
            self.events.append("eof_received")

        def pause_writing(self):
            self.events.append("pause_writing")

        def resume_writing(self):
            self.events.append("resume_writing")

        def connection_lost(self, exc):
            self.events.append(("connection_lost", type(exc).__name__))
            self.lost.set_result(exc)

    return Recorder


def _fileobj(fd, mode):
    return open(fd, mode, buffering=0)


@scenario
async def pipe_read_gets_data_then_eof(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_read_pipe(_recorder(aio, loop), _fileobj(r, "rb"))
    for chunk in (b"one ", b"two ", b"three"):
        os.write(w, chunk)
    os.close(w)
    await aio.wait_for(proto.lost, TIMEOUT)
    return [bytes(proto.data), proto.events, transport.is_closing()]


@scenario
async def pipe_read_extra_info_and_state(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    pipe = _fileobj(r, "rb")
    transport, proto = await loop.connect_read_pipe(_recorder(aio, loop), pipe)
    state = [transport.get_extra_info("pipe") is pipe,
             transport.get_extra_info("nothing", "dflt"),
             transport.get_protocol() is proto, transport.is_reading(),
             transport.is_closing(), isinstance(transport, aio.ReadTransport)]
    transport.close()
    await aio.wait_for(proto.lost, TIMEOUT)
    os.close(w)
    return [state, proto.events, transport.is_closing(), transport.is_reading()]


@scenario
async def pipe_read_pause_and_resume(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_read_pipe(_recorder(aio, loop), _fileobj(r, "rb"))
    transport.pause_reading()
    paused = transport.is_reading()
    transport.pause_reading()  # Twice: no error.
    os.write(w, b"held back")
    await aio.sleep(0.05)
    while_paused = bytes(proto.data)
    transport.resume_reading()
    os.close(w)
    await aio.wait_for(proto.lost, TIMEOUT)
    return [paused, while_paused, bytes(proto.data), transport.is_reading()]


@scenario
async def pipe_read_with_a_stream_reader(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    reader = aio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: aio.StreamReaderProtocol(reader), _fileobj(r, "rb"))
    os.write(w, b"first line\nsecond line\npartial")
    os.close(w)
    lines = [await aio.wait_for(reader.readline(), TIMEOUT) for _ in range(4)]
    return [lines, reader.at_eof()]


@scenario
async def pipe_read_refuses_a_regular_file(aio):
    loop = aio.get_running_loop()
    with tempfile.TemporaryFile() as f:
        outcome = await aobserve(loop.connect_read_pipe(aio.Protocol, f))
    return outcome


@scenario
async def pipe_write_refuses_a_regular_file(aio):
    loop = aio.get_running_loop()
    with tempfile.TemporaryFile() as f:
        outcome = await aobserve(loop.connect_write_pipe(aio.Protocol, f))
    return outcome[:2]


@scenario
async def pipe_write_delivers_in_order_and_closes(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_write_pipe(_recorder(aio, loop), _fileobj(w, "wb"))
    state = [transport.can_write_eof(), isinstance(transport, aio.WriteTransport),
             transport.get_write_buffer_size()]
    for i in range(100):
        transport.write(b"%d," % i)
    transport.writelines([b"a", bytearray(b"b"), memoryview(b"c")])
    transport.close()
    await aio.wait_for(proto.lost, TIMEOUT)
    with open(r, "rb") as rf:
        data = rf.read()
    return [state, data, proto.events, transport.is_closing()]


@scenario
async def pipe_write_takes_any_bytes_like(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_write_pipe(_recorder(aio, loop), _fileobj(w, "wb"))
    outcomes = [observe(transport.write, b""), observe(transport.write, b"b"),
                observe(transport.write, bytearray(b"ba")),
                observe(transport.write, memoryview(b"xmvx")[1:3])]
    transport.close()
    await aio.wait_for(proto.lost, TIMEOUT)
    with open(r, "rb") as rf:
        data = rf.read()
    return [outcomes, data]


@scenario
async def pipe_write_backpressure_pauses_and_resumes(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_write_pipe(_recorder(aio, loop), _fileobj(w, "wb"))
    transport.set_write_buffer_limits(high=4096, low=1024)
    limits = transport.get_write_buffer_limits()
    data = os.urandom(1 << 20)
    transport.write(data)  # Far more than a pipe holds: the rest is buffered.
    paused = list(proto.events)
    buffered = transport.get_write_buffer_size() > 4096
    received = bytearray()
    while len(received) < len(data):
        received += await loop.run_in_executor(None, os.read, r, 1 << 16)
    for _ in range(200):
        if "resume_writing" in proto.events:
            break
        await aio.sleep(0.01)
    size_after = transport.get_write_buffer_size()
    transport.close()
    await aio.wait_for(proto.lost, TIMEOUT)
    os.close(r)
    return [limits, paused, buffered, bytes(received) == data, proto.events, size_after]


@scenario
async def pipe_write_buffer_limit_errors(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_write_pipe(_recorder(aio, loop), _fileobj(w, "wb"))
    outcomes = [observe(transport.set_write_buffer_limits, high=10, low=20),
                observe(transport.set_write_buffer_limits, high=-1),
                observe(transport.set_write_buffer_limits, low=100),
                transport.get_write_buffer_limits()]
    transport.close()
    await aio.wait_for(proto.lost, TIMEOUT)
    os.close(r)
    return outcomes


@scenario
async def pipe_write_reader_closed_with_nothing_buffered(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_write_pipe(_recorder(aio, loop), _fileobj(w, "wb"))
    os.close(r)
    exc = await aio.wait_for(proto.lost, TIMEOUT)
    return [exc, proto.events, transport.is_closing()]


@scenario
async def pipe_write_reader_closed_with_data_buffered(aio):
    loop = aio.get_running_loop()
    errors = []
    loop.set_exception_handler(lambda lp, ctx: errors.append(ctx.get("message")))
    r, w = os.pipe()
    transport, proto = await loop.connect_write_pipe(_recorder(aio, loop), _fileobj(w, "wb"))
    transport.write(b"x" * (1 << 20))
    os.close(r)
    exc = await aio.wait_for(proto.lost, TIMEOUT)
    # What comes after the end: dropped, then logged, never raised.
    later = [observe(transport.write, b"more") for _ in range(3)]
    return [type(exc).__name__, errors, later, transport.get_write_buffer_size()]


@scenario
async def pipe_write_abort_drops_the_buffer(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_write_pipe(_recorder(aio, loop), _fileobj(w, "wb"))
    transport.write(b"y" * (1 << 20))
    transport.abort()
    exc = await aio.wait_for(proto.lost, TIMEOUT)
    received = bytearray()
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        received += chunk
    os.close(r)
    return [exc, len(received) < (1 << 20), transport.get_write_buffer_size()]


@scenario
async def pipe_write_eof_waits_for_the_buffer(aio):
    loop = aio.get_running_loop()
    r, w = os.pipe()
    transport, proto = await loop.connect_write_pipe(_recorder(aio, loop), _fileobj(w, "wb"))
    data = os.urandom(1 << 19)
    transport.write(data)
    transport.write_eof()
    closing = transport.is_closing()
    received = bytearray()
    while True:
        chunk = await loop.run_in_executor(None, os.read, r, 1 << 16)
        if not chunk:
            break
        received += chunk
    exc = await aio.wait_for(proto.lost, TIMEOUT)
    os.close(r)
    return [closing, bytes(received) == data, exc, proto.events]


@scenario
async def pipe_pair_carries_a_conversation(aio):
    # A write pipe and a read pipe over two os.pipe()s, looped back through
    # a task: lines go out, come back, in order.
    loop = aio.get_running_loop()
    r1, w1 = os.pipe()
    wt, wp = await loop.connect_write_pipe(aio.Protocol, _fileobj(w1, "wb"))
    reader = aio.StreamReader()
    rt, _ = await loop.connect_read_pipe(lambda: aio.StreamReaderProtocol(reader),
                                         _fileobj(r1, "rb"))
    got = []
    for i in range(30):
        wt.write(b"msg %d\n" % i)
        got.append(await aio.wait_for(reader.readline(), TIMEOUT))
    wt.close()
    tail = await aio.wait_for(reader.read(), TIMEOUT)
    rt.close()
    return [got[0], got[-1], len(got), tail]


@scenario
async def pipe_transports_over_a_socketpair(aio):
    loop = aio.get_running_loop()
    a, b = socket.socketpair()
    wt, wp = await loop.connect_write_pipe(_recorder(aio, loop), a)
    rt, rp = await loop.connect_read_pipe(_recorder(aio, loop), b)
    wt.write(b"over a socket")
    wt.close()
    await aio.wait_for(wp.lost, TIMEOUT)
    # The writer's close is the reader's EOF.
    await aio.wait_for(rp.lost, TIMEOUT)
    return [bytes(rp.data), wp.events, rp.events]


@scenario
async def pipe_many_at_once_from_many_tasks(aio):
    loop = aio.get_running_loop()

    async def one(i):
        r, w = os.pipe()
        reader = aio.StreamReader()
        rt, _ = await loop.connect_read_pipe(lambda: aio.StreamReaderProtocol(reader),
                                             _fileobj(r, "rb"))
        wt, _ = await loop.connect_write_pipe(aio.Protocol, _fileobj(w, "wb"))
        payload = (b"%d;" % i) * 1000
        wt.write(payload)
        wt.close()
        data = await aio.wait_for(reader.read(), TIMEOUT)
        rt.close()
        return data == payload

    results = await aio.gather(*(one(i) for i in range(30)))
    return [all(results), len(results)]

"""Scenarios: datagram endpoints (UDP and Unix datagram sockets)."""

import os
import socket
import tempfile

from harness import aobserve, observe, scenario
from net_common import TIMEOUT


def _protocols(aio):
    loop = aio.get_running_loop()

    class Echo(aio.DatagramProtocol):
        def __init__(self):
            self.log = []
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport
            self.log.append("made")

        def datagram_received(self, data, addr):
            self.transport.sendto(data.upper(), addr)

        def connection_lost(self, exc):
            self.log.append(("lost", exc))
            self.done.set_result(None)

    class Client(aio.DatagramProtocol):
        def __init__(self):
            self.log = []
            self.queue = aio.Queue()
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport
            self.log.append("made")

        def datagram_received(self, data, addr):
            self.queue.put_nowait(("data", data, addr))

        def error_received(self, exc):
            self.queue.put_nowait(("error", type(exc).__name__))

        def connection_lost(self, exc):
            self.log.append(("lost", exc))
            self.done.set_result(None)

    return Echo, Client


async def _close(aio, *protocols):
    for p in protocols:
        p.transport.close()
    for p in protocols:
        await aio.wait_for(p.done, TIMEOUT)


@scenario
async def udp_echo_connected_client(aio):
    loop = aio.get_running_loop()
    Echo, Client = _protocols(aio)
    st, sp = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    addr = st.get_extra_info("sockname")
    ct, cp = await loop.create_datagram_endpoint(Client, remote_addr=addr)
    replies = []
    for msg in (b"a", b"bc", b"" , b"x" * 1000):
        ct.sendto(msg)
        kind, data, frm = await aio.wait_for(cp.queue.get(), TIMEOUT)
        replies.append((kind, data, frm == addr))
    peer = ct.get_extra_info("peername") == addr
    server_peer = st.get_extra_info("peername")
    await _close(aio, sp, cp)
    return [replies, peer, server_peer, sp.log, cp.log]


@scenario
async def udp_unconnected_sendto_addresses(aio):
    loop = aio.get_running_loop()
    Echo, Client = _protocols(aio)
    s1, p1 = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    s2, p2 = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    ct, cp = await loop.create_datagram_endpoint(
        Client, local_addr=("127.0.0.1", 0))
    out = []
    for st in (s1, s2, s1):
        addr = st.get_extra_info("sockname")
        ct.sendto(b"to", addr)
        kind, data, frm = await aio.wait_for(cp.queue.get(), TIMEOUT)
        out.append(frm == addr)
    await _close(aio, p1, p2, cp)
    return out


@scenario
async def udp_sendto_errors(aio):
    loop = aio.get_running_loop()
    Echo, Client = _protocols(aio)
    st, sp = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    addr = st.get_extra_info("sockname")
    ct, cp = await loop.create_datagram_endpoint(Client, remote_addr=addr)
    bad_type = observe(ct.sendto, "text")
    wrong_addr = observe(ct.sendto, b"x", ("127.0.0.1", 1))
    same_addr = observe(ct.sendto, b"x", addr)
    await aio.wait_for(cp.queue.get(), TIMEOUT)
    await _close(aio, sp, cp)
    after_close = [observe(ct.sendto, b"late") for _ in range(2)]
    return [bad_type, wrong_addr[0], wrong_addr[1], same_addr, after_close,
            ct.is_closing()]


@scenario
async def udp_error_received_on_refused_port(aio):
    loop = aio.get_running_loop()
    _, Client = _protocols(aio)
    probe = socket.socket(type=socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    dead = probe.getsockname()
    probe.close()
    ct, cp = await loop.create_datagram_endpoint(Client, remote_addr=dead)
    got = None
    for _ in range(20):  # The ICMP error arrives on a later send or read.
        ct.sendto(b"anyone?")
        try:
            got = await aio.wait_for(cp.queue.get(), 0.1)
            break
        except TimeoutError:
            continue
    alive = not ct.is_closing()
    await _close(aio, cp)
    return [got, alive]


@scenario
async def udp_endpoint_argument_errors(aio):
    loop = aio.get_running_loop()
    Echo, _ = _protocols(aio)
    tcp = socket.socket()
    udp = socket.socket(type=socket.SOCK_DGRAM)
    try:
        out = [
            await aobserve(loop.create_datagram_endpoint(Echo, sock=tcp)),
            await aobserve(loop.create_datagram_endpoint(
                Echo, sock=udp, local_addr=("127.0.0.1", 0))),
            await aobserve(loop.create_datagram_endpoint(Echo)),
            await aobserve(loop.create_datagram_endpoint(
                Echo, local_addr="127.0.0.1")),
            await aobserve(loop.create_datagram_endpoint(
                Echo, family=socket.AF_UNIX, local_addr=("a", 1))),
        ]
    finally:
        tcp.close()
        udp.close()
    return [(o[0], o[1], o[2].split(", got")[0]) for o in out]


@scenario
async def udp_endpoint_on_sock_and_options(aio):
    loop = aio.get_running_loop()
    Echo, Client = _protocols(aio)
    sock = socket.socket(type=socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    st, sp = await loop.create_datagram_endpoint(Echo, sock=sock)
    same = st.get_extra_info("socket").fileno() == sock.fileno()
    ct, cp = await loop.create_datagram_endpoint(
        Client, local_addr=("127.0.0.1", 0), reuse_port=True, allow_broadcast=True)
    csock = ct.get_extra_info("socket")
    opts = [bool(csock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)),
            bool(csock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST))]
    ct.sendto(b"hi", sock.getsockname())
    kind, data, _ = await aio.wait_for(cp.queue.get(), TIMEOUT)
    await _close(aio, sp, cp)
    return [same, opts, data]


@scenario
async def udp_family_only_endpoint(aio):
    loop = aio.get_running_loop()
    Echo, Client = _protocols(aio)
    st, sp = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    ct, cp = await loop.create_datagram_endpoint(Client, family=socket.AF_INET)
    ct.sendto(b"unbound", st.get_extra_info("sockname"))
    kind, data, _ = await aio.wait_for(cp.queue.get(), TIMEOUT)
    await _close(aio, sp, cp)
    return [kind, data, ct.get_extra_info("peername")]


@scenario
async def udp_abort_and_buffer_api(aio):
    loop = aio.get_running_loop()
    Echo, _ = _protocols(aio)
    st, sp = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    state = [st.get_write_buffer_size(), st.get_write_buffer_limits()]
    st.set_write_buffer_limits(high=100)
    state.append(st.get_write_buffer_limits())
    state.append(observe(st.set_write_buffer_limits, high=1, low=5))
    st.abort()
    await aio.wait_for(sp.done, TIMEOUT)
    state.append(sp.log)
    state.append(st.is_closing())
    return state


@scenario
async def udp_unix_datagram_endpoints(aio):
    loop = aio.get_running_loop()
    Echo, Client = _protocols(aio)
    with tempfile.TemporaryDirectory() as d:
        server_path = os.path.join(d, "srv")
        client_path = os.path.join(d, "cli")
        st, sp = await loop.create_datagram_endpoint(
            Echo, local_addr=server_path, family=socket.AF_UNIX)
        ct, cp = await loop.create_datagram_endpoint(
            Client, local_addr=client_path, remote_addr=server_path,
            family=socket.AF_UNIX)
        ct.sendto(b"over unix")
        kind, data, frm = await aio.wait_for(cp.queue.get(), TIMEOUT)
        await _close(aio, sp, cp)
        return [kind, data, frm == server_path]


@scenario
async def udp_many_datagrams_in_order_per_sender(aio):
    loop = aio.get_running_loop()
    received = []
    done = loop.create_future()
    n = 300

    class Sink(aio.DatagramProtocol):
        def connection_made(self, t):
            self.transport = t

        def datagram_received(self, data, addr):
            received.append(int(data))
            if len(received) == n and not done.done():
                done.set_result(None)

    st, _ = await loop.create_datagram_endpoint(Sink, local_addr=("127.0.0.1", 0))
    ct, _ = await loop.create_datagram_endpoint(
        aio.DatagramProtocol, remote_addr=st.get_extra_info("sockname"))
    for i in range(n):
        ct.sendto(b"%d" % i)
        if i % 50 == 49:
            await aio.sleep(0.01)  # Stay within the socket's buffer.
    await aio.wait_for(done, TIMEOUT)
    ct.close()
    st.close()
    await aio.sleep(0)
    return received == list(range(n))

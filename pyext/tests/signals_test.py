"""mt_asyncio.runtime(signals=...) and the coordinated shutdown of a
runtime while asyncio.run() is in progress.

Each case runs in a fresh interpreter: signal handlers and the runtime are
process-wide, and one case ends the process on purpose."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

WAIT = 60  # Seconds for a child process; each one needs well under 2.

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

PRELUDE = textwrap.dedent("""
    import os, signal, sys, threading, time
    import mt_asyncio
    import mt_asyncio.asyncio as asyncio

    log = []

    async def main():
        log.append("started")
        try:
            await asyncio.sleep(30)
        finally:
            log.append("finally")
            await asyncio.sleep(0.01)  # Unwinding may still await.
            log.append("unwound")

    def report(outcome):
        stopped = mt_asyncio.runtime_info()["state"] != "running"
        print(outcome, log, stopped, sep="|")

    def run_and_report(coro):
        # "returned", or the exception asyncio.run() raised, as "Type:message".
        try:
            asyncio.run(coro)
            report("returned")
        except BaseException as exc:
            report(f"{type(exc).__name__}:{exc}")
""")


def run_child(body):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=WAIT, env=env)


@pytest.mark.parametrize("name,expected", [
    ("SIGTERM", "CancelledError:mt_asyncio runtime shutdown (SIGTERM)"),
    ("SIGUSR1", "CancelledError:mt_asyncio runtime shutdown (SIGUSR1)"),
    ("SIGINT", "KeyboardInterrupt:"),
])
def test_listed_signal_winds_down_asyncio_run(name, expected):
    proc = run_child(f"""
        mt_asyncio.runtime(threads=2, signals=[signal.{name}])

        async def send_when_started():
            while not log:
                await asyncio.sleep(0.001)
            os.kill(os.getpid(), signal.{name})

        async def program():
            asyncio.get_running_loop().create_task(send_when_started())
            await main()

        run_and_report(program())
    """)
    assert proc.returncode == 0, proc.stderr
    # The main task was cancelled and unwound (its finally could await);
    # then the runtime shut down.
    assert proc.stdout.strip().split("|") == [
        expected, "['started', 'finally', 'unwound']", "True"], proc.stdout


def test_second_signal_while_winding_down_goes_to_the_previous_handler():
    # A main task that takes long to unwind: the second Ctrl-C acts at once
    # (KeyboardInterrupt from the default SIGINT handler), as in asyncio.
    proc = run_child("""
        mt_asyncio.runtime(threads=2, signals=[signal.SIGINT])

        async def slow_to_unwind():
            log.append("started")
            try:
                await asyncio.sleep(30)
            finally:
                log.append("unwinding")
                os.kill(os.getpid(), signal.SIGINT)  # The second one.
                await asyncio.sleep(30)

        async def program():
            async def send_when_started():
                while not log:
                    await asyncio.sleep(0.001)
                os.kill(os.getpid(), signal.SIGINT)
            asyncio.get_running_loop().create_task(send_when_started())
            await slow_to_unwind()

        t0 = time.monotonic()
        try:
            asyncio.run(program())
        except BaseException as exc:
            print(type(exc).__name__, log, time.monotonic() - t0 < 10, sep="|")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().split("|") == [
        "KeyboardInterrupt", "['started', 'unwinding']", "True"], proc.stdout


def test_listed_signal_with_no_run_in_progress_keeps_its_default_action():
    proc = run_child("""
        mt_asyncio.runtime(threads=1, signals=[signal.SIGTERM])
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        print("survived")
    """)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stdout, proc.stderr)
    assert "survived" not in proc.stdout


def test_listed_signal_with_no_run_goes_to_the_previous_handler():
    proc = run_child("""
        seen = []
        signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))
        mt_asyncio.runtime(threads=1, signals=[signal.SIGUSR1])
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        print(seen == [signal.SIGUSR1], mt_asyncio.runtime_info()["state"])
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "running"]


def test_signals_only_from_the_main_thread():
    proc = run_child("""
        errors = []
        def configure():
            try:
                mt_asyncio.runtime(threads=1, signals=[signal.SIGTERM])
            except ValueError as exc:
                errors.append(str(exc))
        t = threading.Thread(target=configure)
        t.start()
        t.join()
        print(errors, mt_asyncio.runtime_info()["state"])
    """)
    assert proc.returncode == 0, proc.stderr
    assert "main thread" in proc.stdout and proc.stdout.split()[-1] == "created"


def test_runtime_shutdown_from_another_thread_winds_down_a_run():
    # The control plane's shutdown takes the same path: no run is left
    # waiting for work that will never be stepped.
    proc = run_child("""
        mt_asyncio.runtime(threads=2)

        def shut_down_when_started():
            while not log:
                time.sleep(0.001)
            mt_asyncio._core.request_shutdown()

        threading.Thread(target=shut_down_when_started).start()
        run_and_report(main())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().split("|") == [
        "CancelledError:mt_asyncio runtime shutdown",
        "['started', 'finally', 'unwound']", "True"], proc.stdout


def test_shutdown_stops_accepting_then_closes_open_connections():
    # SIGTERM while a server has a client connected whose handler never
    # finishes by itself: the server stops accepting at once, the main
    # task unwinds (serve_forever closes the server and waits for its
    # connections), and when the grace period ends the connection is
    # aborted, so the run ends and the client sees its socket closed.
    proc = run_child("""
        import socket
        mt_asyncio.runtime(threads=2, signals=[signal.SIGTERM])
        seen = {}

        async def handler(reader, writer):
            log.append("connected")
            await reader.read()  # Until the peer or the shutdown closes it.
            log.append("handler saw eof")

        def client(port):
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            while not log:
                time.sleep(0.001)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # Draining has begun: no one accepts now.
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                seen["new connection"] = "accepted"
            except OSError as e:
                seen["new connection"] = type(e).__name__
            seen["client read"] = s.recv(10)
            s.close()

        async def program():
            server = await asyncio.start_server(handler, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            threading.Thread(target=client, args=(port,)).start()
            await server.serve_forever()

        try:
            asyncio.run(program())
            outcome = "returned"
        except BaseException as exc:
            outcome = type(exc).__name__
        time.sleep(0.5)
        print(outcome, log, sorted(seen.items()), sep="|")
    """)
    assert proc.returncode == 0, proc.stderr
    outcome, log, seen = proc.stdout.strip().split("|")
    assert outcome == "CancelledError", proc.stdout
    # The handler is cancelled with the rest of the run's tasks; whether
    # it saw the EOF first is a race stdlib has too.
    assert log in ("['connected']", "['connected', 'handler saw eof']"), proc.stdout
    assert seen == ("[('client read', b''), "
                    "('new connection', 'ConnectionRefusedError')]"), proc.stdout


def test_loop_signal_handler_takes_a_listed_signal_while_installed():
    # runtime(signals=[SIGTERM]) listens; a loop handler for SIGTERM takes
    # it while installed (no shutdown); once removed, the signal is the
    # runtime's again and winds the run down.
    proc = run_child("""
        mt_asyncio.runtime(threads=2, signals=[signal.SIGTERM])
        listener = signal.getsignal(signal.SIGTERM)

        async def main():
            loop = asyncio.get_running_loop()
            got = asyncio.Event()
            loop.add_signal_handler(signal.SIGTERM, got.set)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(got.wait(), 10)
            log.append("loop handler ran")
            loop.remove_signal_handler(signal.SIGTERM)
            log.append(signal.getsignal(signal.SIGTERM) is listener)
            os.kill(os.getpid(), signal.SIGTERM)
            try:
                await asyncio.sleep(30)
            finally:
                log.append("cancelled")

        run_and_report(main())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "CancelledError:mt_asyncio runtime shutdown (SIGTERM)"
        "|['loop handler ran', True, 'cancelled']|True")


@pytest.mark.parametrize("threads", [1, 4])
def test_signal_signal_from_a_step_of_the_main_threads_loop(threads):
    # A step of the main thread's loop is told it runs on the main thread
    # (threading.current_thread()), so the main-thread-only calls must work
    # there as they do on stdlib: uvicorn checks current_thread() and then
    # installs its handlers with signal.signal(). They run on the thread in
    # run_forever(), and so does the handler when the signal comes.
    proc = run_child(f"""
        got = []
        async def install_and_raise():
            await asyncio.sleep(0)
            on_main = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGUSR2, lambda *a: got.append(
                threading.get_native_id() == threading.main_thread().native_id))
            os.kill(os.getpid(), signal.SIGUSR2)
            for _ in range(200):
                if got:
                    break
                await asyncio.sleep(0.01)
            signal.signal(signal.SIGUSR2, previous)
            signal.set_wakeup_fd(signal.set_wakeup_fd(-1))  # ValueError off main.
            return on_main, got
        print(asyncio.run(install_and_raise(), threads={threads}))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "(True, [True])", proc.stdout

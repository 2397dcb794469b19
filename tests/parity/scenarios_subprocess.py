"""Scenarios: child processes (create_subprocess_exec/_shell, Process,
loop.subprocess_exec/_shell with a SubprocessProtocol).

Children are small shell tools (sh, cat, printf, sleep) and this Python;
every one a scenario starts it also waits for, so none outlives its run
(the parity test checks that no descriptor and no child is left)."""

import hashlib
import os
import signal
import subprocess
import sys

from harness import aobserve, observe, scenario

TIMEOUT = 20
PIPE = subprocess.PIPE


async def _run(aio, *argv, **kwargs):
    proc = await aio.create_subprocess_exec(*argv, **kwargs)
    out, err = await aio.wait_for(proc.communicate(), TIMEOUT)
    return [out, err, proc.returncode]


@scenario
async def subprocess_exec_reads_stdout(aio):
    return await _run(aio, "echo", "hello", "world", stdout=PIPE)


@scenario
async def subprocess_shell_runs_a_pipeline(aio):
    proc = await aio.create_subprocess_shell("printf 'a\\nb\\nc\\n' | wc -l", stdout=PIPE)
    out, err = await aio.wait_for(proc.communicate(), TIMEOUT)
    return [out.strip(), err, proc.returncode]


@scenario
async def subprocess_exit_codes(aio):
    codes = []
    for code in (0, 1, 3, 127, 255):
        proc = await aio.create_subprocess_exec("sh", "-c", f"exit {code}")
        codes.append(await aio.wait_for(proc.wait(), TIMEOUT))
        codes.append(proc.returncode)
    return codes


@scenario
async def subprocess_kill_of_a_sleeping_child(aio):
    proc = await aio.create_subprocess_exec("sleep", "30")
    before = proc.returncode
    proc.kill()
    code = await aio.wait_for(proc.wait(), TIMEOUT)
    return [before, code, proc.returncode]


@scenario
async def subprocess_terminate_of_a_sleeping_child(aio):
    proc = await aio.create_subprocess_exec("sleep", "30")
    proc.terminate()
    return await aio.wait_for(proc.wait(), TIMEOUT)


@scenario
async def subprocess_send_signal_reports_the_signal(aio):
    proc = await aio.create_subprocess_exec("sleep", "30")
    proc.send_signal(signal.SIGUSR1)
    return await aio.wait_for(proc.wait(), TIMEOUT)


@scenario
async def subprocess_child_that_kills_itself(aio):
    proc = await aio.create_subprocess_exec("sh", "-c", "kill -TERM $$")
    return await aio.wait_for(proc.wait(), TIMEOUT)


@scenario
async def subprocess_communicate_large_input_and_output(aio):
    # 4 MiB through cat both ways: communicate() must write and read at
    # once or the pipes fill and both sides wait forever.
    data = os.urandom(1 << 20) * 4
    proc = await aio.create_subprocess_exec("cat", stdin=PIPE, stdout=PIPE)
    out, err = await aio.wait_for(proc.communicate(data), TIMEOUT)
    return [len(out), hashlib.sha256(out).hexdigest() == hashlib.sha256(data).hexdigest(),
            err, proc.returncode]


@scenario
async def subprocess_communicate_large_stderr_and_stdout(aio):
    code = ("import sys\n"
            "for i in range(20000):\n"
            "    sys.stdout.write('o%d\\n' % i); sys.stderr.write('e%d\\n' % i)\n")
    proc = await aio.create_subprocess_exec(sys.executable, "-c", code,
                                            stdout=PIPE, stderr=PIPE)
    out, err = await aio.wait_for(proc.communicate(), TIMEOUT)
    return [out.count(b"\n"), err.count(b"\n"), out.splitlines()[-1],
            err.splitlines()[-1], proc.returncode]


@scenario
async def subprocess_stdout_and_stderr_apart(aio):
    return await _run(aio, "sh", "-c", "echo out; echo err >&2; exit 2",
                      stdout=PIPE, stderr=PIPE)


@scenario
async def subprocess_stderr_into_stdout(aio):
    return await _run(aio, "sh", "-c", "echo out; echo err >&2",
                      stdout=PIPE, stderr=subprocess.STDOUT)


@scenario
async def subprocess_devnull_everywhere(aio):
    proc = await aio.create_subprocess_exec(
        "sh", "-c", "cat; echo out; echo err >&2", stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    streams = [proc.stdin, proc.stdout, proc.stderr]
    result = await aio.wait_for(proc.communicate(), TIMEOUT)
    return [streams, result, proc.returncode]


@scenario
async def subprocess_no_pipes_by_default(aio):
    proc = await aio.create_subprocess_exec("true")
    streams = [proc.stdin, proc.stdout, proc.stderr]
    return [streams, await aio.wait_for(proc.communicate(), TIMEOUT), proc.returncode]


@scenario
async def subprocess_stdin_from_a_descriptor(aio):
    r, w = os.pipe()
    os.write(w, b"through a pipe fd\n")
    os.close(w)
    try:
        return await _run(aio, "cat", stdin=r, stdout=PIPE)
    finally:
        os.close(r)


@scenario
async def subprocess_stdout_to_a_file_object(aio):
    r, w = os.pipe()
    with open(w, "wb", buffering=0) as wf:
        proc = await aio.create_subprocess_exec("echo", "to a file", stdout=wf)
        code = await aio.wait_for(proc.wait(), TIMEOUT)
    with open(r, "rb") as rf:
        data = rf.read()
    return [code, data, proc.stdout]


@scenario
async def subprocess_readline_loop(aio):
    proc = await aio.create_subprocess_exec(
        "sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done", stdout=PIPE)
    lines = []
    async for line in proc.stdout:
        lines.append(line)
    return [lines, await aio.wait_for(proc.wait(), TIMEOUT)]


@scenario
async def subprocess_interactive_cat(aio):
    # A line in, the same line back, fifty times: each write must reach the
    # child and each reply the reader while both stay open.
    proc = await aio.create_subprocess_exec("cat", stdin=PIPE, stdout=PIPE)
    replies = []
    for i in range(50):
        proc.stdin.write(b"ping %d\n" % i)
        await proc.stdin.drain()
        replies.append(await aio.wait_for(proc.stdout.readline(), TIMEOUT))
    proc.stdin.close()
    await proc.stdin.wait_closed()
    rest = await aio.wait_for(proc.stdout.read(), TIMEOUT)
    code = await aio.wait_for(proc.wait(), TIMEOUT)
    return [replies[0], replies[-1], len(replies), rest, code]


@scenario
async def subprocess_communicate_times_out_then_kill(aio):
    proc = await aio.create_subprocess_exec("sleep", "30", stdout=PIPE)
    outcome = await aobserve(aio.wait_for(proc.communicate(), 0.1))
    proc.kill()
    code = await aio.wait_for(proc.wait(), TIMEOUT)
    return [outcome[:2], code]


@scenario
async def subprocess_wait_times_out_under_timeout(aio):
    proc = await aio.create_subprocess_exec("sleep", "30")
    try:
        async with aio.timeout(0.05):
            await proc.wait()
        outcome = "finished"
    except TimeoutError:
        outcome = "TimeoutError"
    proc.kill()
    return [outcome, await aio.wait_for(proc.wait(), TIMEOUT)]


@scenario
async def subprocess_wait_from_several_tasks(aio):
    proc = await aio.create_subprocess_exec("sh", "-c", "sleep 0.05; exit 4")
    codes = await aio.wait_for(aio.gather(*(proc.wait() for _ in range(5))), TIMEOUT)
    return [codes, await proc.wait()]


@scenario
async def subprocess_program_not_found(aio):
    outcome = await aobserve(aio.create_subprocess_exec("/nonexistent/mt-program"))
    return outcome[:2]


@scenario
async def subprocess_not_executable(aio):
    outcome = await aobserve(aio.create_subprocess_exec("/etc/hostname"))
    return outcome[:2]


@scenario
async def subprocess_bad_cwd(aio):
    outcome = await aobserve(aio.create_subprocess_exec("true", cwd="/nonexistent/dir"))
    return outcome[:2]


@scenario
async def subprocess_env_and_cwd_reach_the_child(aio):
    return await _run(aio, "sh", "-c", 'echo "$MT_VALUE"; pwd', stdout=PIPE,
                      env={"MT_VALUE": "from parent", "PATH": os.environ.get("PATH", "")},
                      cwd="/")


@scenario
async def subprocess_bytes_program_and_shell_command(aio):
    a = await _run(aio, b"echo", b"bytes args", stdout=PIPE)
    proc = await aio.create_subprocess_shell(b"echo bytes shell", stdout=PIPE)
    b = await aio.wait_for(proc.communicate(), TIMEOUT)
    return [a, b, proc.returncode]


@scenario
async def subprocess_pass_fds_and_new_session(aio):
    r, w = os.pipe()
    try:
        proc = await aio.create_subprocess_exec(
            "sh", "-c", f"echo via-fd >&{w}", pass_fds=(w,), start_new_session=True)
        code = await aio.wait_for(proc.wait(), TIMEOUT)
        os.close(w)
        w = None
        return [code, os.read(r, 100)]
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


@scenario
async def subprocess_pid_and_repr(aio):
    proc = await aio.create_subprocess_exec("true")
    shape = [type(proc.pid).__name__, proc.pid > 0,
             repr(proc) == f"<Process {proc.pid}>"]
    await aio.wait_for(proc.wait(), TIMEOUT)
    return shape


@scenario
async def subprocess_child_ignores_its_stdin(aio):
    # `true` exits without reading: communicate()'s write meets a closed
    # pipe and is ignored.
    proc = await aio.create_subprocess_exec("true", stdin=PIPE, stdout=PIPE)
    result = await aio.wait_for(proc.communicate(b"x" * (1 << 20)), TIMEOUT)
    return [result, proc.returncode]


@scenario
async def subprocess_readline_over_the_limit(aio):
    proc = await aio.create_subprocess_exec(
        "sh", "-c", "printf '%0200d\\n' 0", stdout=PIPE, limit=64)
    outcome = await aobserve(proc.stdout.readline())
    rest = await aio.wait_for(proc.stdout.read(), TIMEOUT)
    await aio.wait_for(proc.wait(), TIMEOUT)
    return [outcome, len(rest)]


@scenario
async def subprocess_200_children_at_once(aio):
    async def one(i):
        proc = await aio.create_subprocess_exec("sh", "-c", f"echo {i}; exit {i % 7}",
                                                stdout=PIPE)
        out, _ = await proc.communicate()
        return [int(out), proc.returncode]

    results = await aio.wait_for(aio.gather(*(one(i) for i in range(200))), TIMEOUT * 3)
    return [results == [[i, i % 7] for i in range(200)], len(results)]


@scenario
async def subprocess_children_from_a_task_group(aio):
    outputs = {}

    async def one(i):
        proc = await aio.create_subprocess_shell(f"echo child {i}", stdout=PIPE)
        out, _ = await proc.communicate()
        outputs[i] = out

    async with aio.timeout(TIMEOUT * 3):
        async with aio.TaskGroup() as tg:
            for i in range(40):
                tg.create_task(one(i))
    return [outputs[i] for i in range(40)]


@scenario
async def subprocess_cancelled_communicate_leaves_a_usable_process(aio):
    proc = await aio.create_subprocess_exec("sh", "-c", "read x; echo got $x",
                                            stdin=PIPE, stdout=PIPE)
    task = aio.create_task(proc.stdout.read())
    await aio.sleep(0.05)
    task.cancel()
    cancelled = (await aobserve(task))[:2]
    out, _ = await aio.wait_for(proc.communicate(b"later\n"), TIMEOUT)
    return [cancelled, out, proc.returncode]


# --- the loop's API with a SubprocessProtocol --------------------------------

def _recording_protocol(aio, loop):
    class Recorder(aio.SubprocessProtocol):
        def __init__(self):
            self.events = []
            self.data = {1: b"", 2: b""}
            self.exited = loop.create_future()
            self.lost = loop.create_future()

        def connection_made(self, transport):
            self.events.append("connection_made")

        def pipe_data_received(self, fd, data):
            self.data[fd] += data

        def pipe_connection_lost(self, fd, exc):
            self.events.append(("pipe_connection_lost", fd, exc))

        def process_exited(self):
            self.events.append("process_exited")
            self.exited.set_result(None)

        def connection_lost(self, exc):
            self.events.append(("connection_lost", exc))
            self.lost.set_result(None)

    return Recorder


@scenario
async def subprocess_protocol_callbacks(aio):
    loop = aio.get_running_loop()
    transport, proto = await loop.subprocess_exec(
        _recording_protocol(aio, loop), "sh", "-c", "echo out; echo err >&2; exit 5")
    await aio.wait_for(proto.lost, TIMEOUT)
    events = proto.events
    # Which of process_exited and the pipes' ends comes first is the
    # kernel's choice; the first and last callbacks are not.
    shape = [events[0], events[-1], sorted(map(str, events[1:-1]))]
    result = [shape, proto.data, transport.get_returncode(), transport.is_closing()]
    transport.close()
    return result + [transport.is_closing()]


@scenario
async def subprocess_transport_pipes_and_pid(aio):
    loop = aio.get_running_loop()
    transport, proto = await loop.subprocess_exec(
        _recording_protocol(aio, loop), "cat")
    pipes = [transport.get_pipe_transport(fd) for fd in (0, 1, 2)]
    kinds = [isinstance(pipes[0], aio.WriteTransport),
             isinstance(pipes[1], aio.ReadTransport),
             isinstance(pipes[2], aio.ReadTransport),
             transport.get_pipe_transport(3)]
    pid_ok = transport.get_pid() == transport.get_extra_info("subprocess").pid
    pipes[0].write(b"echoed")
    pipes[0].close()
    await aio.wait_for(proto.lost, TIMEOUT)
    transport.close()
    return [kinds, pid_ok, proto.data, transport.get_returncode()]


@scenario
async def subprocess_transport_close_kills_a_running_child(aio):
    loop = aio.get_running_loop()
    transport, proto = await loop.subprocess_exec(
        _recording_protocol(aio, loop), "sleep", "30", stdin=None, stdout=None,
        stderr=None)
    transport.close()
    await aio.wait_for(proto.exited, TIMEOUT)
    await aio.wait_for(proto.lost, TIMEOUT)
    return [transport.get_returncode(), proto.events]


@scenario
async def subprocess_transport_signals_after_close(aio):
    loop = aio.get_running_loop()
    transport, proto = await loop.subprocess_exec(
        _recording_protocol(aio, loop), "true", stdin=None, stdout=None, stderr=None)
    await aio.wait_for(proto.lost, TIMEOUT)
    transport.close()
    return [observe(transport.kill)[:2], observe(transport.terminate)[:2],
            observe(transport.send_signal, signal.SIGTERM)[:2]]


@scenario
async def subprocess_shell_protocol(aio):
    loop = aio.get_running_loop()
    transport, proto = await loop.subprocess_shell(
        _recording_protocol(aio, loop), "echo $((6 * 7))")
    await aio.wait_for(proto.lost, TIMEOUT)
    transport.close()
    return [proto.data, transport.get_returncode()]


# --- bad arguments ------------------------------------------------------------

async def _bad(aio, method, *args, **kwargs):
    loop = aio.get_running_loop()
    return (await aobserve(getattr(loop, method)(aio.SubprocessProtocol, *args,
                                                 **kwargs)))


@scenario
async def subprocess_shell_bad_arguments(aio):
    return [
        await _bad(aio, "subprocess_shell", ["echo", "list"]),
        await _bad(aio, "subprocess_shell", 42),
        await _bad(aio, "subprocess_shell", "true", shell=False),
        await _bad(aio, "subprocess_shell", "true", universal_newlines=True),
        await _bad(aio, "subprocess_shell", "true", bufsize=1),
        await _bad(aio, "subprocess_shell", "true", text=True),
        await _bad(aio, "subprocess_shell", "true", encoding="utf-8"),
        await _bad(aio, "subprocess_shell", "true", errors="strict"),
    ]


@scenario
async def subprocess_exec_bad_arguments(aio):
    return [
        await _bad(aio, "subprocess_exec", "true", shell=True),
        await _bad(aio, "subprocess_exec", "true", universal_newlines=True),
        await _bad(aio, "subprocess_exec", "true", bufsize=4096),
        await _bad(aio, "subprocess_exec", "true", text=True),
        await _bad(aio, "subprocess_exec", "true", encoding="utf-8"),
        await _bad(aio, "subprocess_exec", "true", errors="strict"),
    ]


@scenario
async def subprocess_create_functions_refuse_text_mode(aio):
    return [
        (await aobserve(aio.create_subprocess_exec("true", text=True)))[:3],
        (await aobserve(aio.create_subprocess_shell("true", universal_newlines=True)))[:3],
        (await aobserve(aio.create_subprocess_shell("true", bufsize=1)))[:3],
    ]

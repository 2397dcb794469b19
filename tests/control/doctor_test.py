"""mtctl doctor against live services: a sick one names each seeded
problem (lost wakeup, long step with its stack, spinning task, two-task
lock cycle); a healthy one with the waits real services have reports
nothing."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "doctor_app.py")
MTCTL = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mt_asyncio", "control", "mtctl")
EXIT_FINDINGS = 5


@pytest.fixture
def service():
    folder = tempfile.mkdtemp(prefix="mtctl-doctor-", dir="/tmp")
    socket_path = os.path.join(folder, "control.sock")
    procs = []

    def start(kind):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        proc = subprocess.Popen([sys.executable, APP, socket_path, kind], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env)
        procs.append(proc)
        line = proc.stdout.readline()
        assert line.strip() == "ready", line
        return "unix://" + socket_path

    yield start
    for proc in procs:
        proc.stdin.close()
        try:
            assert proc.wait(timeout=20) == 0
        finally:
            proc.kill()
            proc.wait(timeout=10)
    shutil.rmtree(folder, ignore_errors=True)


def doctor(target, *args):
    proc = subprocess.run([MTCTL, "--target", target, "--timeout", "20", "doctor", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode in (0, EXIT_FINDINGS), proc.stderr
    return proc


def findings_of(answer, kind):
    return [f for f in answer.get("findings", []) if f["kind"] == "FINDING_KIND_" + kind]


def task_names(finding):
    return sorted(t["name"] for t in finding.get("tasks", []))


def test_doctor_names_each_seeded_problem(service):
    target = service("sick")
    answer = {}
    # The long step is seen on the blocker's first step; give the detector
    # and the stack reader a moment if the first call came first.
    for _ in range(20):
        proc = doctor(target, "-o", "json", "--window", "0.3")
        answer = json.loads(proc.stdout)
        if any(f.get("stack") for f in findings_of(answer, "LONG_STEP")) and \
                findings_of(answer, "DEADLOCK"):
            break
    assert proc.returncode == EXIT_FINDINGS

    lost = findings_of(answer, "LOST_WAKEUP")
    assert sorted(task_names(f) for f in lost) == [["lost"], ["lost-event"]], answer
    assert any(frame["function"] == "lost_forever" for frame in lost[0]["stack"])

    # A step's stack can be missed (the step ended first, or stacks were
    # being read at their rate limit), never wrong: every one read names it.
    long_steps = findings_of(answer, "LONG_STEP")
    with_stack = [f for f in long_steps if f.get("stack")]
    assert with_stack, [f.get("stack_note") for f in long_steps]
    assert all(f.get("stack_note") for f in long_steps if not f.get("stack"))
    step = with_stack[0]
    assert step["duration_seconds"] >= 0.1
    functions = [frame["function"] for frame in step.get("stack", [])]
    assert "hold_the_worker" in functions, step
    assert functions.index("hold_the_worker") > functions.index("blocker")

    spinning = findings_of(answer, "SPINNING")
    assert [task_names(f) for f in spinning] == [["spinner"]], answer

    deadlocks = findings_of(answer, "DEADLOCK")
    assert [task_names(f) for f in deadlocks] == [["first-a-then-b", "first-b-then-a"]], answer
    assert len(deadlocks[0]["primitives"]) == 2
    assert all(p.startswith("Lock ") for p in deadlocks[0]["primitives"])

    locks = [p for p in answer["primitives"] if p["kind"] == "Lock"]
    assert len(locks) == 2
    for lock in locks:
        holder = lock["holder_task_name"]
        (waiter,) = lock["waiters"]
        assert {holder, waiter["task_name"]} == {"first-a-then-b", "first-b-then-a"}
        assert waiter["role"] == "acquire"

    # The same as text: one line per finding, the stack under the long step.
    text = doctor(target).stdout
    for heading in ("LOST WAKEUP", "LONG STEP", "SPINNING", "DEADLOCK"):
        assert heading in text, text
    assert "in hold_the_worker" in text
    assert "findings in" in text


def test_doctor_reports_nothing_on_a_healthy_service(service):
    target = service("healthy")
    proc = doctor(target, "-o", "json", "--window", "0.5")
    answer = json.loads(proc.stdout)
    assert answer.get("findings", []) == [], json.dumps(answer, indent=1)
    assert proc.returncode == 0
    kinds = {p["kind"]: p for p in answer["primitives"]}
    # Holders and waiters of what the service's tasks wait on.
    lock = kinds["Lock"]
    assert lock["holder_task_name"] == "lock-holder"
    assert [w["task_name"] for w in lock["waiters"]] == ["lock-waiter"]
    assert [w["role"] for w in kinds["Queue"]["waiters"]] == ["get"]
    assert [w["task_name"] for w in kinds["Condition"]["waiters"]] == ["condition-waiter"]
    assert [w["task_name"] for w in kinds["Semaphore"]["waiters"]] == ["semaphore-waiter"]
    assert int(answer["tasks_examined"]) >= 20
    assert "no problems found" in doctor(target).stdout


def test_doctor_refuses_a_window_out_of_range(service):
    target = service("healthy")
    proc = subprocess.run([MTCTL, "--target", target, "doctor", "--window", "6"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr

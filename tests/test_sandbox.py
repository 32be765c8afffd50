"""Attacks on the judge from candidate code, each held by the sandbox (bubblewrap; CPU, real workers).

Each candidate computes the right output after its attack, so a `correct` verdict means the attack
changed nothing the trusted side relies on. Without bubblewrap these attacks are not held (the
README's table says so) and the tests skip; the verdict tests of test_verdicts.py run either way,
and `test_verdicts_hold_without_the_sandbox` below runs some with the sandbox turned off.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid
from pathlib import Path

import pytest

from conftest import DATA, attacking, candidate_source
from kernelpro.harness import EvalOptions, PhaseLimits, Verdict
from kernelpro.harness import sandbox

FAST = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=1.0,
                   limits=PhaseLimits(correctness_s=30, load_s=60, reference_s=60))
needs_sandbox = pytest.mark.skipif(not sandbox.isolation().active, reason=sandbox.describe())

GOOD = candidate_source("good")


@needs_sandbox
def test_the_api_key_is_nowhere_the_candidate_can_read(cpu_evaluator, linear_problem, monkeypatch):
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)  # in this (trusted) process, as a search has it
    attack = f"""
import os
for pid in os.listdir("/proc"):
    try:
        if {secret!r}.encode() in open(f"/proc/{{pid}}/environ", "rb").read():
            raise RuntimeError(f"found the key in /proc/{{pid}}/environ")
    except (OSError, PermissionError):
        pass
if {secret!r} in str(dict(os.environ)):
    raise RuntimeError("found the key in the environment")
"""
    result = cpu_evaluator.evaluate(linear_problem, attacking(attack), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason


@needs_sandbox
def test_the_judge_survives_a_candidate_that_kills_its_parent(cpu_evaluator, linear_problem):
    attack = """
import os, signal
os.kill(os.getppid(), signal.SIGKILL)
"""
    result = cpu_evaluator.evaluate(linear_problem, attacking(attack), FAST)
    assert result.verdict in (Verdict.CORRECT, Verdict.CRASH, Verdict.RUNTIME_ERROR), result.reason
    os.kill(os.getpid(), 0)  # still here; and the next evaluation works
    again = cpu_evaluator.evaluate(linear_problem, GOOD, FAST)
    assert again.verdict is Verdict.CORRECT, again.reason


@needs_sandbox
def test_a_candidate_finds_nothing_the_one_before_it_left_and_cannot_touch_their_parent(cpu_evaluator,
                                                                                        linear_problem):
    """On CPU workers are forked from one warm parent per problem (harness/zygote.py): the next candidate
    still starts in a sandbox as fresh as a new one, and the parent's memory is out of its reach."""
    leave = """
import os, subprocess, sys
for folder in ("/tmp", "/dev/shm", os.getcwd(), os.environ["HOME"]):
    open(os.path.join(folder, "kp-left-behind"), "w").write("from the candidate before")
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
"""
    look = """
import os
for folder in ("/tmp", "/dev/shm", os.getcwd(), os.environ["HOME"]):
    if os.path.exists(os.path.join(folder, "kp-left-behind")):
        raise RuntimeError(f"found the last candidate's file in {folder}")
mine = os.getsid(0)
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) not in (1, os.getppid()):
        try:
            if os.getsid(int(name)) != mine:
                raise RuntimeError(f"found process {name} of another session")
        except ProcessLookupError:
            pass
for path in (f"/proc/{os.getppid()}/mem", f"/proc/{os.getppid()}/environ"):
    try:
        open(path, "rb").read(1)
    except OSError:
        continue
    raise RuntimeError(f"read {path} of the parent every candidate is forked from")
"""
    assert cpu_evaluator.pool.forked
    first = cpu_evaluator.evaluate(linear_problem, attacking(leave), FAST)
    assert first.verdict is Verdict.CORRECT, first.reason
    second = cpu_evaluator.evaluate(linear_problem, attacking(look), FAST)
    assert second.verdict is Verdict.CORRECT, second.reason


def _running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@needs_sandbox
def test_no_process_outlives_the_evaluation(cpu_evaluator, linear_problem):
    marker = f"kp-survivor-{uuid.uuid4().hex}"
    attack = f"""
import os, subprocess, sys
if os.fork() == 0:  # a double fork into a session of its own
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", {marker!r}])
    os._exit(0)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", {marker!r}], start_new_session=True)
"""
    result = cpu_evaluator.evaluate(linear_problem, attacking(attack), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    survivors = _running(marker)
    for pid in survivors:  # leave nothing behind even if the test fails
        os.kill(pid, signal.SIGKILL)
    assert not survivors


@needs_sandbox
def test_writes_outside_the_working_folder_do_not_land(cpu_evaluator, linear_problem, tmp_path):
    repo_probe = Path(__file__).resolve().parents[1] / f"kp-probe-{uuid.uuid4().hex}"
    outside = tmp_path / "the_run_folder.txt"
    outside.write_text("kept")
    attack = f"""
for path, text in (({str(repo_probe)!r}, "planted"), ({str(outside)!r}, "overwritten"),
                   ({str(Path.home() / 'kp-probe.txt')!r}, "planted"),
                   ({str(DATA / 'problems' / 'linear_relu_residual.py')!r}, "broken")):
    try:
        open(path, "w").write(text)
    except OSError:
        pass
"""
    result = cpu_evaluator.evaluate(linear_problem, attacking(attack), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert not repo_probe.exists() and not (Path.home() / "kp-probe.txt").exists()
    assert outside.read_text() == "kept"
    assert "broken" not in (DATA / "problems" / "linear_relu_residual.py").read_text()


@needs_sandbox
def test_the_network_is_out_of_reach(cpu_evaluator, linear_problem):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    attack = f"""
import socket
for host in ("127.0.0.1", "localhost"):
    try:
        socket.create_connection((host, {port}), timeout=2).sendall(b"hello")
    except OSError:
        pass
"""
    try:
        result = cpu_evaluator.evaluate(linear_problem, attacking(attack), FAST)
    finally:
        stop.set()
        thread.join(2)
        server.close()
    assert result.verdict is Verdict.CORRECT, result.reason
    assert not accepted, "a candidate reached a port opened outside its sandbox"


@pytest.mark.parametrize("name", ["good", "segfault", "exits", "mutates_input"])
def test_verdicts_hold_without_the_sandbox(name, linear_problem, no_sandbox, tmp_path):
    """The same verdicts with the sandbox off (KERNELPRO_SANDBOX=none, as on a machine without
    bubblewrap): the harness's own checks do not depend on it."""
    from kernelpro.harness import Evaluator
    from kernelpro.harness.cache import BuildCache
    assert not sandbox.isolation().active
    with Evaluator("cpu", cache=BuildCache(tmp_path / "builds"), spares=0) as evaluator:
        result = evaluator.evaluate(linear_problem, candidate_source(name), FAST)
    expected = {"good": Verdict.CORRECT, "segfault": Verdict.CRASH, "exits": Verdict.RUNTIME_ERROR,
                "mutates_input": Verdict.REJECTED}[name]
    assert result.verdict is expected, result.reason


def test_the_anthropic_coder_refuses_to_run_unsandboxed_unless_told(no_sandbox, tmp_path):
    from kernelpro.search_settings import SearchInputError, validate
    from kernelpro.settings import SearchSettings
    problem = str(DATA / "problems" / "linear_relu_residual.py")
    with pytest.raises(SearchInputError, match="--unsafe-no-sandbox"):
        validate(SearchSettings(problem=problem, out=str(tmp_path / "a"), coder="anthropic"), resume=False)
    validate(SearchSettings(problem=problem, out=str(tmp_path / "b"), coder="anthropic", unsafe_no_sandbox=True),
             resume=False)
    validate(SearchSettings(problem=problem, out=str(tmp_path / "c"), coder="offline"), resume=False)


@pytest.mark.parametrize("isolated", [True, False], ids=["sandbox", "no-sandbox"])
def test_a_candidate_over_the_memory_limit_is_killed_and_judged(isolated, linear_problem, monkeypatch, tmp_path):
    """The host-memory watch (harness.memguard) holds with and without bubblewrap: a candidate that
    fills 3 GB under a 1 GB limit is killed, and the judge records a crash that says why."""
    from kernelpro.harness import Evaluator
    from kernelpro.harness.cache import BuildCache
    if isolated and not sandbox.isolation().active:
        pytest.skip(sandbox.describe())
    if not isolated:
        monkeypatch.setenv("KERNELPRO_SANDBOX", "none")
        sandbox.isolation.cache_clear()
    monkeypatch.setenv("KERNELPRO_MEMORY_LIMIT_GB", "1")
    attack = """
import time
hog = b"\\x01" * (3 << 30)
time.sleep(10)
"""
    try:
        with Evaluator("cpu", cache=BuildCache(tmp_path / "builds"), spares=0) as evaluator:
            hog = evaluator.evaluate(linear_problem, attacking(attack), FAST)
            fine = evaluator.evaluate(linear_problem, GOOD, FAST)
    finally:
        sandbox.isolation.cache_clear()
    assert hog.verdict is Verdict.CRASH, hog.reason
    assert "host memory" in hog.reason and "1.0 GB limit" in hog.reason, hog.reason
    assert fine.verdict is Verdict.CORRECT, fine.reason


def test_the_memory_limit_setting(monkeypatch):
    from kernelpro.harness import memguard
    monkeypatch.setenv("KERNELPRO_MEMORY_LIMIT_GB", "2.5")
    assert memguard.limit_bytes() == int(2.5 * 2**30)
    monkeypatch.setenv("KERNELPRO_MEMORY_LIMIT_GB", "none")
    assert memguard.limit_bytes() is None
    monkeypatch.setenv("KERNELPRO_MEMORY_LIMIT_GB", "lots")
    with pytest.raises(ValueError, match="KERNELPRO_MEMORY_LIMIT_GB"):
        memguard.limit_bytes()
    monkeypatch.delenv("KERNELPRO_MEMORY_LIMIT_GB")
    assert 0 < memguard.limit_bytes() < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@needs_sandbox
def test_the_profiled_program_runs_in_the_sandbox(linear_problem, monkeypatch, tmp_path):
    """tools.runner starts the profiled program (candidate code) as it starts workers: the key is
    unreadable, writes outside its folder do not land, and it gets no network."""
    from kernelpro.tools.api import Target
    from kernelpro.tools.runner import run_target
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    outside = tmp_path / "outside.txt"
    attack = f"""
import os, socket
for pid in os.listdir("/proc"):
    try:
        if {secret!r}.encode() in open(f"/proc/{{pid}}/environ", "rb").read():
            raise RuntimeError("found the key")
    except OSError:
        pass
try:
    open({str(outside)!r}, "w").write("planted")
except OSError:
    pass
if [name for _, name in socket.if_nameindex()] != ["lo"]:
    raise RuntimeError("a network interface besides loopback")
"""
    candidate = tmp_path / "candidate.py"
    candidate.write_text(attacking(attack))
    result, _ = run_target(Target(problem_path=DATA / "problems" / "linear_relu_residual.py",
                                  candidate_path=candidate), "timeline")
    assert result
    assert not outside.exists()


@needs_sandbox
def test_a_checkout_under_tmp_stays_visible_read_only_over_the_private_tmp(tmp_path, monkeypatch):
    """The sandbox's /tmp is private and empty, so a checkout and its .venv cloned under /tmp vanished from the
    worker's view ("bwrap: execvp /tmp/clean/.venv/bin/python: No such file or directory": every verdict a
    runtime_error). The interpreter's environment, kernelpro's source and the import path are shown read-only
    over it where they lie under /tmp; the rest of /tmp stays private."""
    import subprocess
    assert str(tmp_path).startswith("/tmp/")  # pytest's base temporary folder
    package = tmp_path / "site"
    package.mkdir()
    (package / "marker.txt").write_text("seen\n")
    (tmp_path / "private.txt").write_text("hidden")
    monkeypatch.setattr("sys.path", [*__import__("sys").path, str(package)])
    workdir = Path.home() / f".kp-sandbox-test-{uuid.uuid4().hex}"
    workdir.mkdir()
    try:
        script = (f"cat {package / 'marker.txt'}; ls {tmp_path / 'private.txt'} 2>/dev/null || echo private; "
                  f"touch {package / 'planted'} 2>/dev/null || echo read-only")
        done = subprocess.run(sandbox.wrap(["sh", "-c", script], workdir), capture_output=True, text=True, timeout=60)
    finally:
        workdir.rmdir()
    assert done.stdout.split() == ["seen", "private", "read-only"], done.stdout + done.stderr
    assert not (package / "planted").exists()

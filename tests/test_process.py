"""Worker processes: scrubbed environment, capped logs, whole-group kills."""

from __future__ import annotations

import io
import textwrap
import time

import pytest

from kernelpro.harness.process import CappedStream, WorkerProcess, exit_description, scrubbed_environment


def test_environment_is_an_allowlist_without_secrets():
    env = scrubbed_environment(source={"PATH": "/bin", "ANTHROPIC_API_KEY": "sk", "AWS_SECRET_ACCESS_KEY": "x",
                                       "CUDA_VISIBLE_DEVICES": "0", "CUDA_API_KEY": "y", "HOME": "/root",
                                       "LC_ALL": "C"})
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == "0" and env["LC_ALL"] == "C"
    assert not {"ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "CUDA_API_KEY", "HOME"} & env.keys()


def test_an_exit_says_which_signal_ended_the_child_also_through_a_sandbox():
    assert exit_description(1) == "exit 1"
    assert exit_description(-9) == "killed by SIGKILL (exit -9)"
    assert exit_description(137) == "killed by SIGKILL (exit 137)"  # bwrap and shells: 128 + the signal
    assert exit_description(255) == "exit 255"  # no such signal


def test_capped_stream_keeps_head_and_tail():
    data = b"".join(f"line {i}\n".encode() for i in range(200_000))
    log = CappedStream(io.BufferedReader(io.BytesIO(data)), head_bytes=1000, tail_bytes=1000).log()
    assert log.total_bytes == len(data)
    assert log.head.startswith("line 0\n") and log.tail.endswith("line 199999\n")
    assert len(log.head) == 1000 and len(log.tail) == 1000
    assert log.dropped_bytes == len(data) - 2000
    assert "bytes dropped" in log.text()


def test_kill_takes_the_whole_process_group_and_escaped_children(tmp_path, no_sandbox):
    """A worker that starts a grandchild (like nvcc under ninja) and one that leaves the group. Without
    the sandbox (which would end them with its namespace, see test_sandbox.py): the kill alone."""
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "spawner.py").write_text(textwrap.dedent(f"""
        import os, subprocess, sys, time
        pids = []
        for new_session in (False, True):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                     start_new_session=new_session)
            pids.append(child.pid)
        open({str(tmp_path / 'pids')!r}, "w").write(" ".join(map(str, pids)))
        time.sleep(600)
    """))
    worker = WorkerProcess("cpu", {"PYTHONPATH": str(module_dir)}, module="spawner")
    pids_file = tmp_path / "pids"
    for _ in range(200):
        if pids_file.exists() and pids_file.read_text():
            break
        time.sleep(0.05)
    children = [int(p) for p in pids_file.read_text().split()]
    worker.kill()
    time.sleep(0.2)
    for pid in [worker.pid, *children]:
        assert not _alive(pid), pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_settle_waits_for_the_workers_booting_ahead_and_keeps_their_first_message():
    # Before a worker times, the evaluator waits until the spares booting beside it are ready (on
    # CUDA: their contexts exist), so that no context is created on the GPU during a timed window.
    from kernelpro.harness import channel
    from kernelpro.harness.pool import WorkerPool
    pool = WorkerPool("cpu", spares=1, forked=False)  # spawned workers boot ahead; forked ones need not
    try:
        spare = pool._ready[0]
        try:  # just spawned: a worker takes longer than this to import torch and say it is ready
            spare.receive(0.01)
            raise AssertionError("the worker was ready at once; this test cannot tell settle from not waiting")
        except channel.ChannelTimeout:
            pass
        pool.settle(120)
        worker = pool.acquire()
        assert worker is spare
        header, _ = worker.receive(0.001)  # read by settle, kept for its user
        # the pid the worker sees: its host pid, or its pid inside the sandbox's PID namespace
        assert header["type"] == "ready" and (header["pid"] == spare.pid) is not spare.sandboxed
        pool.release(worker)
        lone = WorkerProcess("cpu")
        try:
            lone.settle(0.0)  # no wait asked: nothing read, nothing lost
            assert lone.receive(120)[0]["type"] == "ready"
        finally:
            lone.kill()
    finally:
        pool.close()


def test_a_worker_about_to_time_waits_for_every_other_forked_worker_to_start_but_not_for_itself():
    # Forked workers (the default) start when acquired; on CUDA each creates its context then. A worker
    # that is about to time waits until every other has said it is ready, never for itself, and never
    # for one already running (whose reader holds it for as long as that one's phase lasts).
    import threading
    from kernelpro.harness import channel
    from kernelpro.harness.pool import WorkerPool
    pool = WorkerPool("cpu", forked=True)
    try:
        first = pool.acquire()
        assert first.receive(120)[0]["type"] == "ready"
        second = pool.acquire()
        assert not second._heard
        pool.settle(120, timing=first)
        assert second._heard and second.receive(0.001)[0]["type"] == "ready"  # kept for its user
        # second's reader now waits (here 8 s) for a message that does not come: settle does not wait for it
        def read() -> None:
            try:
                second.receive(8)
            except (channel.ChannelTimeout, channel.ChannelClosed):
                pass
        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.2)
        began = time.monotonic()
        pool.settle(120, timing=first)
        assert time.monotonic() - began < 4
        reader.join()
        pool.release(second)
        pool.release(first)
    finally:
        pool.close()


def test_the_worker_start_is_fork_unless_the_environment_asks_for_spawn(monkeypatch):
    from kernelpro.harness.errors import KernelproError
    from kernelpro.harness.pool import worker_start
    monkeypatch.delenv("KERNELPRO_WORKER_START", raising=False)
    assert worker_start() == "fork"
    monkeypatch.setenv("KERNELPRO_WORKER_START", "Spawn")
    assert worker_start() == "spawn"
    monkeypatch.setenv("KERNELPRO_WORKER_START", "thread")
    with pytest.raises(KernelproError, match="KERNELPRO_WORKER_START='thread': expected fork or spawn"):
        worker_start()

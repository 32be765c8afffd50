"""The SQLite stores are shared by threads: a bench's lanes (two per GPU) start and finish problems while the
leaderboard and the display read them; the knowledge base is written and read by whichever thread uses it. Each statement and each transaction holds the connection's lock
(`runstore.SerializedConnection`). Under Python 3.12 (the GPU machine's) a bare connection used this way fails with
"bad parameter or other API misuse", and a bench lost a problem to it; 3.11's sqlite3 happens to survive it."""

from __future__ import annotations

import threading

from kernelpro.bench.store import BenchStore
from kernelpro.bench.suite import Entry
from kernelpro.knowledge import KnowledgeBase, State


def test_lanes_and_readers_at_once_lose_no_problem(tmp_path):
    store = BenchStore(tmp_path)
    entries = [Entry(key=f"level1/{n}_p", path=tmp_path / f"{n}_p.py", level=1, number=n, name=f"{n}_p")
               for n in range(600)]
    store.add(entries)
    failures = []

    def lane(mine):
        try:
            for entry in mine:
                store.start(entry.key, "0")
                store.finish(entry.key, {"speedup": 1.0})
        except Exception as error:  # noqa: BLE001 - what a lane thread would die of
            failures.append(repr(error))

    def reader():
        try:
            for _ in range(100):
                store.rows()
                store.get("settings")
        except Exception as error:  # noqa: BLE001
            failures.append(repr(error))

    threads = [threading.Thread(target=lane, args=(entries[i::4],)) for i in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert [row["status"] for row in store.rows()] == ["done"] * len(entries)
    store.close()


def test_the_knowledge_base_written_and_read_at_once_keeps_every_observation(tmp_path):
    base = KnowledgeBase(tmp_path / "kb.sqlite")
    state, failures = State("gemm", "memory_bound"), []

    def writer(index):
        try:
            for n in range(50):
                base.record(state, ["fuse_epilogue", "cuda_graphs"], ok=True, log_gain=0.1, problem=f"p{index}.{n}")
        except Exception as error:  # noqa: BLE001 - what the thread would die of
            failures.append(repr(error))

    def reader():
        try:
            for _ in range(50):
                base.summary(state)
        except Exception as error:  # noqa: BLE001
            failures.append(repr(error))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)] + [threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert {s.technique: s.attempts for s in base.stats()} == {"fuse_epilogue": 200, "cuda_graphs": 200}
    base.close()

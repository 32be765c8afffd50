"""The SQLite stores are shared by threads: a bench's lanes (two per GPU) start and finish problems while the
leaderboard and the display read them. Each statement and each transaction holds the connection's lock
(`runstore.SerializedConnection`). Under Python 3.12 (the GPU machine's) a bare connection used this way fails with
"bad parameter or other API misuse", and a bench lost a problem to it; 3.11's sqlite3 happens to survive it."""

from __future__ import annotations

import threading

from kernelpro.bench.store import BenchStore
from kernelpro.bench.suite import Entry


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

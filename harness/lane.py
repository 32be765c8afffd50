"""The device's lane: who may run on it while evaluations overlap (`--parallel N`).

Evaluations share the device for their reference and correctness phases (a few may check outputs side by side);
one holds it alone while it is timed and its energy measured, so nothing else runs on the device during a
timing. A timing that asks waits for the sharers to leave and stops new ones from entering: the timing lane is
the search's critical path. Native builds, the coder and the trusted side's checks before a worker starts need
no lane, so they overlap whatever the device does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

SHARED, ALONE = "shared", "alone"


class LaneClosed(Exception):
    """The evaluator closed (a search interrupted) while an evaluation waited for the device."""


@dataclass(frozen=True)
class Holding:
    """One stay in the lane: how (`shared` or `alone`), when it was asked for, entered and left (monotonic s)."""
    how: str
    asked: float
    entered: float
    left: float


class Lane:
    """The lane of one device. `history` keeps the last `keep` stays, for tests and reports."""

    def __init__(self, keep: int = 1000):
        self._changed = threading.Condition()
        self._sharers = 0
        self._alone = False
        self._waiting_alone = 0
        self._closed = False
        self.keep = keep
        self.history: list[Holding] = []

    def ticket(self) -> "Ticket":
        return Ticket(self)

    def enter(self, how: str) -> float:
        """Waits for room to enter `how`; returns when it was asked for (monotonic s). LaneClosed once `close`d."""
        asked = time.monotonic()
        with self._changed:
            if how == ALONE:
                self._waiting_alone += 1
                try:
                    self._changed.wait_for(lambda: self._closed or not self._alone and self._sharers == 0)
                finally:
                    self._waiting_alone -= 1
            else:
                self._changed.wait_for(lambda: self._closed or not self._alone and self._waiting_alone == 0)
            if self._closed:
                raise LaneClosed("the evaluator closed while this evaluation waited for the device")
            if how == ALONE:
                self._alone = True
            else:
                self._sharers += 1
        return asked

    def close(self) -> None:
        """Every evaluation waiting to enter, and every later one, gets LaneClosed instead of the device."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def leave(self, how: str, asked: float, entered: float) -> None:
        with self._changed:
            if how == ALONE:
                self._alone = False
            else:
                self._sharers -= 1
            self.history.append(Holding(how, asked, entered, time.monotonic()))
            del self.history[:-self.keep]
            self._changed.notify_all()


class Ticket:
    """One evaluation's way through the lane: `share()`, then `alone()` (which leaves the shared lane first),
    then `release()` (safe to call in any state, and more than once). `waited_s` sums the time spent waiting."""

    def __init__(self, lane: Lane):
        self.lane = lane
        self.how: str | None = None
        self.waited_s = 0.0
        self._asked = self._entered = 0.0

    def _move(self, how: str) -> None:
        self.release()
        asked = self.lane.enter(how)
        self._entered = time.monotonic()
        self.how, self._asked = how, asked
        self.waited_s += self._entered - asked

    def share(self) -> None:
        self._move(SHARED)

    def alone(self) -> None:
        self._move(ALONE)

    def release(self) -> None:
        if self.how is not None:
            self.lane.leave(self.how, self._asked, self._entered)
            self.how = None

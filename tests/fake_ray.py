"""A stand-in for the `ray` module with the calls kernelpro's Ray backend makes (init, remote, wait, get,
shutdown): tasks run in this process, one by one, when the driver waits for them. A real local Ray instance takes
minutes to start on two cores; the backend's own logic (tasks per problem, results streamed into the bench's
database, files sent back, a dead task recorded) is what the CPU tests check. `tests/test_bench.py` also runs the
real Ray under `pytest -m slow`."""

from __future__ import annotations

import types


class TaskDied(RuntimeError):
    """What ray.get raises for a task whose worker died."""


class FakeRay(types.ModuleType):
    def __init__(self, dies: tuple[str, ...] = ()):
        super().__init__("ray")
        self.initialized = False
        self.dies = dies  # problem keys whose task dies instead of running
        self.calls: list[str] = []
        self.resources: list[dict] = []

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, address=None, **options) -> None:
        self.initialized = True
        self.calls.append(f"init {address}")

    def shutdown(self) -> None:
        self.initialized = False
        self.calls.append("shutdown")

    def remote(self, **resources):
        self.resources.append(resources)
        fake = self

        def wrap(function):
            class Remote:
                @staticmethod
                def remote(*args, **kwargs):
                    return _Ref(fake, function, args, kwargs)
            return Remote
        return wrap

    def wait(self, refs: list, num_returns: int = 1):
        ready = refs[:num_returns]
        for ref in ready:
            ref.run()
        return ready, refs[num_returns:]

    def get(self, ref):
        ref.run()
        if ref.error is not None:
            raise ref.error
        return ref.value


class _Ref:
    def __init__(self, fake: FakeRay, function, args, kwargs):
        self.fake, self.function, self.args, self.kwargs = fake, function, args, kwargs
        self.done, self.value, self.error = False, None, None

    def run(self) -> None:
        if self.done:
            return
        self.done = True
        entry = self.args[0]
        if entry.key in self.fake.dies:
            self.error = TaskDied(f"the worker running {entry.key} died")
            return
        self.value = self.function(*self.args, **self.kwargs)

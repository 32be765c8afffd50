"""The worker: one reference and one candidate, in an untrusted process.

Run as `python -m kernelpro.harness.worker FD DEVICE` by `process.WorkerProcess`.
The order of events is what makes the verdict trustworthy:

1. `guards` is imported first, saving the genuine comparison, timer and
   synchronize functions.
2. Reference phase: for every trial, a fresh seed, fresh weights and fresh inputs;
   the reference outputs go to the trusted process and are deleted here. Free
   device memory is then poisoned with NaN, so no stale reference result can be
   returned as `torch.empty(...)`.
3. Only then is the candidate imported. Each trial builds `ModelNew` with the
   trial's seed, calls it on clones of the inputs, snapshots the outputs on the
   current stream at once, synchronizes (on CPU, waits), and checks that nothing
   changed after the return, that inputs are untouched and that outputs are plain
   tensors that alias no input. The snapshot goes to the trusted process (into its
   output slot where it gave one, `outputslots`), which compares it with the reference.
4. Timing, when the trusted process asks for it.

Nothing here decides a verdict about correctness: this process only reports.
"""

from __future__ import annotations

import sys

from kernelpro.harness import guards  # noqa: F401  (first: saves the genuine functions)

import os
import socket
import statistics
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from kernelpro.harness import channel, compilecache, flags, outputslots, probes, sandbox, variants
from kernelpro.harness.ceilings import measured_if_room
from kernelpro.harness.errors import OUT_OF_MEMORY, missing_packages_line, one_line
from kernelpro.harness.modelio import (DTYPES, build_model, cast_to, describe_values, flatten_outputs,  # noqa: F401
                                      import_file, normalization_depth, normalization_layers, parameter_bytes,
                                      set_seed, tensor_bytes)
from kernelpro.harness.payload import pack_values
from kernelpro.harness.timing import InterleavedTimer, cannot_reach, kernelbench_times, launch_profile

TIMING_POOL_SIZE = 3


class Report(Exception):
    """Stop the job and send this header (a verdict or a problem error)."""

    def __init__(self, header: dict):
        super().__init__(header.get("reason", ""))
        self.header = header


def error_tail(error: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(error))
    return text[-limit:]


def compiler_error_line(text: str) -> str | None:
    """The first `error:` line a compiler printed, if any."""
    for line in text.splitlines():
        if " error" in line.lower() and ("error:" in line.lower() or "error " in line.lower()):
            return line.strip()[:300]
    return None


def build_failure_reason(error: BaseException) -> str:
    line = compiler_error_line(str(error))
    return f"build failed: {line}" if line else f"build failed: {one_line(error)}"


def is_build_failure(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}"
    return ("Error building extension" in text or "CalledProcessError" in text
            or "CompilationError" in type(error).__name__ or "nvcc" in str(error)[:2000])


class Job:
    def __init__(self, sock: socket.socket, device: torch.device, spec: dict):
        self.sock = sock
        self.device = device
        self.spec = spec
        self.dtype = DTYPES[spec["precision"]]
        self.workdir = Path.cwd()
        self.problem = None
        self.current_phase = ""
        self.sizes: dict = {}  # the reference's input, output, parameter and peak bytes (trial 0)
        self.output_templates: list[torch.Tensor] = []
        self.output_devices: list[torch.device] = []
        self.reference_aliases: list[bool] = []  # per output: does the reference's alias an input?
        self.slot = outputslots.SlotWriter(sock)  # where outputs go, when the trusted side gives one

    def send_outputs(self, header: dict, values: list, region: int | None, answered: bool = False) -> bool:
        """`values` into their region of the output slot, else as a payload; then waits while they are compared, a
        payload too where `answered` (it is compared with outputs in the slot). Whether they went into the slot."""
        meta = self.slot.write(values, self.sync, region)
        if meta is None:
            self.send(header, pack_values(values))
            if answered:
                self.slot.expect_answer()
        else:
            self.send({**header, "slot": meta})
        self.slot.wait()
        return meta is not None

    # -- helpers ---------------------------------------------------------------
    def send(self, header: dict, payload: bytes | list = b"") -> None:
        channel.send(self.sock, header, payload)

    def phase(self, name: str) -> None:
        self.current_phase = name
        self.send({"type": "phase", "phase": name})

    def cast(self, value):
        return cast_to(value, self.device, self.dtype)

    def sync(self) -> None:
        if self.device.type == "cuda":
            guards.cuda_synchronize(self.device)

    def build_model(self, cls, seed: int, init_inputs: list):
        return build_model(cls, seed, init_inputs, self.device, self.dtype, self.spec.get("model_mode", "train"))

    # -- phases ----------------------------------------------------------------
    def trial_values(self, seed: int) -> tuple[list, list]:
        """A trial's init inputs and inputs, drawn again from its seed whenever they are needed: a
        worker never holds more than one trial's inputs (at KernelBench's sizes one input is GBs)."""
        init_inputs = [self.cast(x) for x in self.call_problem(self.problem.get_init_inputs, seed, "get_init_inputs")]
        inputs = [self.cast(x) for x in self.call_problem(self.problem.get_inputs, seed, "get_inputs")]
        return init_inputs, inputs

    def reference_phase(self):
        self.phase("reference")
        path = self.workdir / "reference.py"
        path.write_text(self.spec["problem_source"])
        try:
            problem = import_file("kernelpro_reference", path)
        except ModuleNotFoundError as error:  # the problem's own fault: a package it needs
            raise Report({"type": "problem_error",
                          "cause": missing_packages_line([(error.name or str(error)).split(".")[0]])})
        except Exception as error:  # the problem's own fault
            raise Report({"type": "problem_error", "cause": f"importing it failed: {one_line(error)}"})
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not callable(getattr(problem, name, None)):
                raise Report({"type": "problem_error", "cause": f"{name} is missing or not callable"})
        self.problem = problem
        flops = bytes_moved = 0
        sizes: dict = {}
        signature: dict = {}  # the reference's inputs and outputs, described (trial 0)
        sensitivity: dict | None = None  # the reference against its inputs moved by one ulp (trial 0, when asked)
        probed: dict = {}  # the reference under settings a candidate may change (trial 0, when asked)
        cuda = self.device.type == "cuda"
        # When the trusted side kept this problem's reference outputs from an earlier evaluation, only
        # trial 0 runs here, for the sizes and the output shapes the checks below need.
        send_outputs = self.spec.get("reference_outputs", True)
        for trial in range(self.spec["correct_trials"] if send_outputs else 1):
            seed = self.spec["seed"] + trial
            init_inputs, inputs = self.trial_values(seed)
            if cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
            try:
                model = self.build_model(problem.Model, seed, init_inputs)
                set_seed(seed)  # forward's own random draws (an active dropout) start from the trial's seed
                with torch.no_grad():
                    if trial == 0 and self.spec.get("count_flops", True):
                        flops, outputs = self.count_flops(model, inputs)
                    else:
                        outputs = model(*inputs)
                self.sync()
            except torch.OutOfMemoryError as error:
                raise Report({"type": "problem_error", "cause": "the reference Model ran out of device memory "
                              f"({self.memory_line(inputs)}): {one_line(error)}"})
            except Exception as error:
                raise Report({"type": "problem_error", "cause": f"the reference Model failed: {one_line(error)}"})
            structure, outputs = flatten_outputs(outputs)
            if trial == 0:
                tensors = [o for o in outputs if isinstance(o, torch.Tensor)]
                bytes_moved = tensor_bytes(inputs) + tensor_bytes(outputs) + parameter_bytes(model)
                self.reference_aliases = [any(guards.overlaps(o, x) for x in inputs if isinstance(x, torch.Tensor))
                                          for o in tensors]
                # shapes and devices only: the tensors themselves go as soon as they are sent
                self.output_devices = [t.device for t in tensors]
                self.output_templates = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors]
                described = bool(self.spec.get("describe"))
                signature = {"inputs": describe_values(inputs),
                             "outputs": describe_values(outputs, magnitude=described)}
                if described:
                    signature.update(normalization_layers=normalization_layers(model),
                                     normalization_depth=normalization_depth(model))
                del tensors
                sizes = {"input_bytes": tensor_bytes(inputs), "output_bytes": tensor_bytes(outputs),
                         "parameter_bytes": parameter_bytes(model),
                         "peak_bytes": torch.cuda.max_memory_allocated(self.device) if cuda else 0}
                self.sizes = sizes
                # the sizes first: the trusted side offers the output slot on them, which the reference's own
                # outputs use too (no candidate code has run in this process yet)
                self.send({"type": "reference_sizes", **sizes, "outputs": len(signature["outputs"])})
                if self.spec.get("output_slot"):
                    self.slot.receive()
                if self.spec.get("sensitivity"):
                    sensitivity = probes.sensitivity(self, problem, seed, outputs)
                probed = probes.settings(self, problem, seed, outputs, [
                    name for name in self.spec.get("variants", [])
                    if variants.changes_anything(name, model, inputs, self.device)])
            if not send_outputs:
                del model, outputs, inputs, init_inputs
                break
            del model, inputs, init_inputs
            self.send_outputs({"type": "reference_output", "trial": trial, "structure": structure}, outputs, 0)
            del outputs  # nothing of this trial stays here
        if cuda:
            torch.cuda.empty_cache()
        self.send({"type": "reference_info", "flops": flops, "bytes_moved": bytes_moved, **sizes,
                   "signature": signature, "sensitivity": sensitivity,
                   "variants": {name: found for name, found in probed.items() if found is not None}})

    def memory_line(self, inputs: list) -> str:
        """The sizes an out-of-memory verdict names."""
        gib = 1 << 30
        sizes = self.sizes or {"input_bytes": tensor_bytes(inputs)}
        parts = [f"inputs {sizes['input_bytes'] / gib:.2f} GiB"]
        if "output_bytes" in sizes:
            parts += [f"reference outputs {sizes['output_bytes'] / gib:.2f} GiB",
                      f"reference peak {sizes['peak_bytes'] / gib:.2f} GiB"]
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            parts.append(f"{free / gib:.1f} of {total / gib:.1f} GiB free now")
        return ", ".join(parts)

    def call_problem(self, function, seed: int, name: str) -> list:
        """Call get_inputs/get_init_inputs with the device as default, so random inputs are
        drawn on the GPU (fast, and identical for reference and candidate); a problem whose
        input code cannot run that way is called again on the CPU. Any values are accepted, as
        KernelBench accepts them (numbers, strings, None, tuples, lists, tensors inside them)."""
        try:
            set_seed(seed)
            with self.device:
                values = function()
        except torch.OutOfMemoryError as error:
            raise Report({"type": "problem_error", "cause": f"{name}() ran out of device memory: {one_line(error)}"})
        except Exception:
            values = None
        try:
            if values is None:
                set_seed(seed)
                values = function()
        except Exception as error:
            raise Report({"type": "problem_error", "cause": f"{name}() raised {one_line(error)}"})
        if not isinstance(values, (list, tuple)):
            raise Report({"type": "problem_error", "cause": f"{name}() returned {type(values).__name__}, not a list"})
        return list(values)

    def count_flops(self, model, inputs):
        try:
            from torch.utils.flop_counter import FlopCounterMode
            counter = FlopCounterMode(display=False)
            with counter:
                outputs = model(*inputs)
            return int(counter.get_total_flops()), outputs
        except Exception:
            return 0, model(*inputs)

    def poison(self) -> None:
        guards.prefill_like(self.output_templates, self.device)
        if self.device.type == "cuda":
            guards.poison_cuda_free_memory(self.device)

    def load_phase(self):
        self.phase("load")
        path = self.workdir / "candidate.py"
        path.write_text(self.spec["candidate_source"])
        self.poison()
        try:
            candidate = import_file("kernelpro_candidate", path)
        except SyntaxError as error:
            raise Report({"type": "verdict", "verdict": "compile_error",
                          "reason": f"syntax error at line {error.lineno}: {error.msg}", "log": error_tail(error)})
        except torch.OutOfMemoryError:
            raise  # serve() makes it the runtime_error that names the phase and the sizes
        except BaseException as error:
            if is_build_failure(error):
                raise Report({"type": "verdict", "verdict": "compile_error",
                              "reason": build_failure_reason(error), "log": error_tail(error)})
            raise Report({"type": "verdict", "verdict": "load_error",
                          "reason": f"importing the candidate failed: {one_line(error)}", "log": error_tail(error)})
        self.check_tampering()
        if not isinstance(getattr(candidate, "ModelNew", None), type):
            raise Report({"type": "verdict", "verdict": "load_error",
                          "reason": "the candidate does not define class ModelNew"})
        self.candidate = candidate
        self.send({"type": "loaded"})

    def check_tampering(self) -> None:
        changed = guards.tampered_names()
        if changed:
            raise Report({"type": "verdict", "verdict": "rejected",
                          "reason": f"the candidate replaced harness functions: {', '.join(changed[:5])}"})

    def run_candidate(self, model, inputs: list, seed: int) -> tuple[str, list]:
        """One call, with the checks that need the live objects. Returns the snapshots. Like the
        reference's, the call starts from the trial's seed: a dropout drawn the same way matches."""
        own_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        self.poison()
        set_seed(seed)
        with torch.no_grad():
            raw = model(*own_inputs)
        structure, outputs = flatten_outputs(raw)
        del raw
        for index, output in enumerate(outputs):
            if isinstance(output, torch.Tensor) and type(output) is not guards.tensor_type:
                raise Report({"type": "verdict", "verdict": "rejected",
                              "reason": f"output {index} is a tensor subclass ({type(output).__name__}), "
                                        "not a plain torch.Tensor"})
        snapshots = [guards.snapshot(o) if isinstance(o, torch.Tensor) else o for o in outputs]
        self.sync()
        if self.device.type == "cpu" and self.spec["cpu_settle_s"]:
            guards.sleep(self.spec["cpu_settle_s"])
        self.check_after_call(outputs, snapshots, inputs, own_inputs)
        return structure, snapshots

    def check_after_call(self, outputs, snapshots, inputs, own_inputs) -> None:
        for index, (output, snap) in enumerate(zip(outputs, snapshots)):
            if not isinstance(output, torch.Tensor):
                continue
            if index < len(self.output_devices) and output.device != self.output_devices[index]:
                raise Report({"type": "verdict", "verdict": "incorrect",
                              "reason": f"output {index} is on {output.device}, the reference's on "
                                        f"{self.output_devices[index]}"})
            if output.layout != torch.strided:
                raise Report({"type": "verdict", "verdict": "rejected",
                              "reason": f"output {index} is not a dense tensor ({output.layout})"})
            if not guards.same_bits(snap, output):
                raise Report({"type": "verdict", "verdict": "rejected",
                              "reason": f"output {index} changed after forward returned: work was left "
                                        "running on another stream or thread"})
            aliases_reference = (index < len(self.reference_aliases) and self.reference_aliases[index])
            for position, value in enumerate(own_inputs):
                if isinstance(value, torch.Tensor) and guards.overlaps(output, value) and not aliases_reference:
                    raise Report({"type": "verdict", "verdict": "rejected",
                                  "reason": f"output {index} is a view of input {position}"})
        for position, (pristine, used) in enumerate(zip(inputs, own_inputs)):
            if isinstance(pristine, torch.Tensor) and not guards.same_bits(pristine, used):
                raise Report({"type": "verdict", "verdict": "rejected",
                              "reason": f"the candidate modified input {position}"})

    def correctness_phase(self):
        self.phase("correctness")
        for index in range(self.spec["correct_trials"]):
            seed = self.spec["seed"] + index
            # the trial's seconds by step, sent with its outputs: where a correctness phase's time goes (the
            # judge times the transfer and its comparison on its side)
            steps, began = {}, time.perf_counter()
            init_inputs, inputs = self.trial_values(seed)
            steps["inputs"], began = time.perf_counter() - began, time.perf_counter()
            model = self.trial_call(index, lambda: self.build_model(self.candidate.ModelNew, seed, init_inputs))
            steps["model"] = time.perf_counter() - began
            # each call's outputs go out before the next call: the device holds one call's tensors at a time
            in_slot = False  # trial 0's outputs, compared with the repeat's where they lie
            for repeat in (False, True) if index == 0 else (False,):  # determinism: trial 0 twice, same inputs
                began = time.perf_counter()
                if repeat and isinstance(model, torch.nn.Module):
                    # KernelBench moves the model (`.to(device, dtype)`) before each call; an RNN re-flattens its
                    # weights into new memory then, and the old is poisoned before the repeat: a candidate that
                    # kept the old weights' address (a CUDA graph captured on them) reads NaN and disagrees
                    model = self.trial_call(index, lambda: model.to(device=self.device, dtype=self.dtype))
                structure, snapshots = self.trial_call(index, lambda: self.run_candidate(model, inputs, seed))
                self.check_tampering()
                steps["call"] = time.perf_counter() - began
                in_slot = self.send_outputs({"type": "candidate_output", "trial": index, "structure": structure,
                                             "count": len(snapshots), "repeat": repeat, "steps": steps},
                                            snapshots, 1 if repeat else 0, answered=repeat and in_slot)
                del snapshots
                steps = {}
            del model, inputs, init_inputs

    def trial_call(self, index: int, call):
        """A correctness trial's step; what it raises becomes the trial's verdict."""
        try:
            return call()
        except Report:
            raise
        except torch.OutOfMemoryError:
            raise  # serve() makes it the runtime_error that names the phase and the sizes
        except BaseException as error:
            verdict = "compile_error" if is_build_failure(error) else "runtime_error"
            raise Report({"type": "verdict", "verdict": verdict,
                          "reason": f"trial {index}: {one_line(error)}", "log": error_tail(error)})

    def timing_pool_size(self, functions: int) -> int:
        """Input sets to rotate through: TIMING_POOL_SIZE where they fit in the device's free memory
        beside one output per timed model and the reference's peak, else 2 (the fewest that still
        change the inputs between two calls)."""
        if self.device.type != "cuda":
            return TIMING_POOL_SIZE
        sizes = self.sizes
        free, _ = torch.cuda.mem_get_info(self.device)
        fixed = sizes.get("output_bytes", 0) * functions + sizes.get("peak_bytes", 0)
        for size in range(TIMING_POOL_SIZE, 2, -1):
            if sizes.get("input_bytes", 0) * (size + 1) + fixed < 0.8 * free:
                return size
        return 2

    def timing_phase(self, baselines: list[str], profile_kernels: bool, kernelbench: bool = False,
                     ceilings: bool = True):
        self.phase("timing")
        seed = self.spec["seed"]
        init_inputs, first_inputs = self.trial_values(seed)
        # each timed model with the library settings it was built under (harness/flags.py)
        own = self.spec.get("process_settings") or flags.snapshot()
        reference = flags.WithSettings(self.build_model(self.problem.Model, seed, init_inputs), own)
        functions = {"eager": reference}
        if "compile" in baselines:
            functions["compile"] = flags.WithSettings(
                torch.compile(self.build_model(self.problem.Model, seed, init_inputs)), own)
        candidate = self.build_model(self.candidate.ModelNew, seed, init_inputs)
        functions["candidate"] = flags.WithSettings(candidate, flags.snapshot())
        pool = [first_inputs]
        for extra in range(1, self.timing_pool_size(len(functions))):
            pool.append([self.cast(x) for x in self.call_problem(self.problem.get_inputs, seed + 1000 + extra,
                                                                 "get_inputs")])
        timer = InterleavedTimer(self.device, pool, self.spec["l2_flush_bytes"])
        target = self.spec.get("stop_below_speedup")
        stop = cannot_reach(target) if target else None
        device_ms, host_ms, last = timer.run(functions, self.spec["timing_trials"],
                                             self.spec["timing_budget_s"], self.spec["warmup_calls"], seed, stop)
        compiled_last = last.pop("compile", None)  # judged against eager's on the trusted side, like the candidate
        self.check_tampering()
        kernelbench_ms = self.kernelbench_timing(functions, timer) if kernelbench else None
        self.check_tampering()
        ceilings = self.measure_ceilings() if ceilings and self.device.type == "cuda" else {}
        # after every timing: a profiler's pass may leave its callbacks on, and each later launch would pay for them
        profiled = (launch_profile(functions["candidate"], pool[0], self.sync)
                    if profile_kernels and self.device.type == "cuda" else {})
        kernels = profiled.get("names", [])
        self.check_tampering()
        _, eager_out = flatten_outputs(last.pop("eager"))
        _, candidate_out = flatten_outputs(last.pop("candidate"))
        _, compile_out = flatten_outputs(compiled_last) if compiled_last is not None else (None, [])
        count, compiled = len(eager_out), len(compile_out)
        self.send_outputs({"type": "timing", "device_ms": device_ms, "host_ms": host_ms, "kernels": kernels,
                           "ceilings": ceilings, "final_count": count, "compile_count": compiled,
                           "kernelbench": kernelbench_ms, "stopped_early": timer.stopped_early,
                           "launch_profile": {k: v for k, v in profiled.items() if k != "names"} or None},
                          list(eager_out) + list(candidate_out) + list(compile_out), None)
        del eager_out, candidate_out, compile_out, compiled_last
        self.timed = {"eager": functions["eager"], "candidate": functions["candidate"]}, pool

    def kernelbench_timing(self, functions: dict, timer: InterleavedTimer) -> dict:
        """The candidate, then the reference, timed by KernelBench's method (see timing.kernelbench_times):
        the numbers published KernelBench results are made of. Never decides a verdict."""
        inputs = timer.fresh_inputs()
        try:
            samples = {name: kernelbench_times(functions[name], inputs, self.device, timer.flush_buffer)
                       for name in ("candidate", "eager")}
        except Exception as error:  # e.g. a candidate that cannot run with autograd on
            return {"error": one_line(error)}
        return {"candidate_mean_ms": statistics.fmean(samples["candidate"]),
                "reference_mean_ms": statistics.fmean(samples["eager"]), "trials": len(samples["candidate"])}

    def energy_phase(self, windows: int = 1):
        """Back-to-back calls in windows the trusted process measures: it says go and how long. `windows`
        rounds, the reference's window then the candidate's in each, so drift (heat, clocks) falls on both."""
        self.phase("energy")
        functions, pool = self.timed
        for name in ("eager", "candidate") * windows:
            self.send({"type": "energy_ready", "name": name})
            command, _ = channel.receive(self.sock)
            model, calls = functions[name], 0
            began = time.perf_counter()
            with torch.no_grad():
                while True:
                    model(*pool[calls % len(pool)])
                    calls += 1
                    if calls % 8 == 0:
                        self.sync()
                        if time.perf_counter() - began >= command["min_s"]:
                            break
            self.sync()
            self.send({"type": "energy_done", "name": name, "calls": calls,
                       "seconds": time.perf_counter() - began})

    def measure_ceilings(self) -> dict:
        found = measured_if_room(self.device.type)
        return asdict(found) if found else {}


def serve(sock: socket.socket, device_name: str) -> None:
    device = torch.device("cuda", 0) if device_name == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.empty(1, device=device)  # create the context while the worker waits
    channel.send(sock, {"type": "ready", "pid": os.getpid(), "torch": torch.__version__,
                        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"})
    spec, _ = channel.receive(sock)
    for folder in (spec["extensions_dir"], spec["triton_cache_dir"]):
        sandbox.restore_build(folder)  # in the sandbox: the cached build, private to this worker
    os.environ["TORCH_EXTENSIONS_DIR"] = spec["extensions_dir"]
    os.environ["TRITON_CACHE_DIR"] = spec["triton_cache_dir"]
    # the torch.compile baseline's caches kept for this problem (harness/compilecache.py)
    compiled = compilecache.use(spec["compile_cache"], spec["triton_cache_dir"], Path.cwd()) \
        if spec.get("compile_cache") else None
    spec["process_settings"] = flags.snapshot()  # before any candidate code runs (harness/flags.py)
    job = Job(sock, device, spec)
    try:
        job.reference_phase()
        job.load_phase()
        job.correctness_phase()
        command, _ = channel.receive(sock)
        if command.get("cmd") == "time":
            job.timing_phase(command.get("baselines", ["eager"]), command.get("profile_kernels", True),
                             command.get("kernelbench", False), command.get("ceilings", True))
            if command.get("energy"):
                job.energy_phase(int(command.get("energy_windows", 1)))
            if compiled is not None and spec.get("keep_compile_cache"):  # named only with the compile baseline
                job.send({"type": "compile_cache"}, compilecache.pack(compiled, spec["triton_cache_dir"]))
        job.send({"type": "done"})
    except Report as report:
        channel.send(sock, report.header)
    except torch.OutOfMemoryError as error:
        channel.send(sock, {"type": "verdict", "verdict": "runtime_error", "log": error_tail(error),
                            "out_of_memory": True,
                            "reason": f"{OUT_OF_MEMORY} in the {job.current_phase} phase "
                                      f"({job.memory_line([])}): {one_line(error)}"})
    except BaseException as error:
        verdict = "compile_error" if is_build_failure(error) else "runtime_error"
        channel.send(sock, {"type": "verdict", "verdict": verdict, "reason": one_line(error),
                            "log": error_tail(error)})


def preload(device_name: str = "cpu") -> None:
    """What the reference phase would import on first use, imported while the worker boots (or once,
    in a fork server): the FLOP counter's first count pulls in torch._dynamo and sympy, about 1.5 s
    of CPU. Two elements stay under every parallel grain size: no thread pool starts (a fork server
    forks after this). On CUDA also Triton's hash of its own installation, which its first compilation
    in a process makes (it reads every file of the package: 1.0 s of a Triton candidate's first call
    on an H100 machine); it touches no GPU."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False):
        torch.zeros(2).add(1)
    if device_name == "cuda":
        try:
            from triton.runtime.cache import triton_key
            triton_key()
        except Exception:  # no Triton, or another one: its first compilation pays for it, as before
            pass


def serve_and_exit(fd: int, device_name: str) -> None:
    """Serve one job on the channel at `fd`, then end the process (a spawned worker, or one forked by
    the zygote)."""
    sock = socket.socket(fileno=fd)
    serve(sock, device_name)
    sock.close()
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: candidate threads and atexit hooks do not matter now


def main() -> None:
    sandbox.limit_self()  # before any candidate code
    preload(sys.argv[2])
    serve_and_exit(int(sys.argv[1]), sys.argv[2])


if __name__ == "__main__":
    main()

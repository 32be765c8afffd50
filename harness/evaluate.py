"""Evaluating candidates: the trusted side that decides every verdict.

`Evaluator.evaluate(problem, source, options)` runs: static checks → native build
(in the CPU build pool, cached by source hash) → reference → load → correctness →
timing, each phase under its own wall-clock limit, in a fresh worker process that
is killed with its whole process group afterwards. This process parses the
candidate but never imports it; it compares the outputs itself.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import time
from concurrent.futures import Future

from kernelpro.harness import (channel, compare, compilecache, outputslots, policy, readings, recheck, sandbox,
                               tritonwarm)
from kernelpro.harness.buildqueue import BuildQueue
from kernelpro.harness.cache import BuildCache, BuildEntry, needs_native_build, source_hash
from kernelpro.harness.ceilings import CeilingsStore, KeptCeilings, settle
from kernelpro.harness.errors import DeviceError, ProblemError
from kernelpro.harness.lane import Lane, LaneClosed, Ticket
from kernelpro.harness.memory import MemoryPlan, Reservation
from kernelpro.harness.outcome import Finished, Outcome, final_checks, make_result
from kernelpro.harness.payload import available_memory_bytes, host_payload, spill
from kernelpro.harness.problem import Problem, reference_candidate
from kernelpro.harness.refcache import ReferenceCache, References, reference_key
from kernelpro.harness.pool import STARTUP_LIMIT_S, WorkerPool
from kernelpro.harness.process import ChannelWorker
from kernelpro.harness.records import EnergyWindow, EvalOptions, EvalResult, MemorySizes, Phase, TimingStats, Verdict
from kernelpro.harness.timing import summarize
from kernelpro.harness.toolchain import (ARCH_SPECIFIC, arch_for, build_environment, cuda_arch_list,  # noqa: F401
                                         cuda_available)

log = logging.getLogger("kernelpro.harness")

SUSPICIOUS_SPEEDUP = 10.0
#: how far under the roofline's floor a timing must be to be checked again: the floor's bandwidth is a 1 GB copy's,
#: and a kernel that streams the same bytes at that rate times within a few percent of it either way
UNDER_FLOOR_MARGIN = 0.05
REVERIFY_TRIALS = 10
#: why an evaluation run again alone, after it ran out of device memory beside others or its slot, has no output slot
RUN_AGAIN_ALONE = "none: run again alone after running out of device memory, outputs through the channel"


def default_device() -> str:
    return "cuda" if cuda_available() else "cpu"


def check_device(device: str) -> None:
    import torch
    if device == "cuda" and not cuda_available():
        raise DeviceError("--device cuda was asked for, but torch sees no CUDA device "
                          f"(torch {torch.__version__}); use --device cpu")


class Evaluator:
    """Evaluates candidates on one device. Reuse one for many evaluations.

    On the CPU, while it compares a candidate's outputs, it sets torch's thread count in this process to one (and
    back after), so the worker computing beside it keeps the other cores: code of the calling process that computes
    with torch on the CPU at that moment gets one thread too."""

    def __init__(self, device: str = "cpu", cache: BuildCache | None = None, spares: int = 1,
                 build_workers: int = 2, energy_meter=None, reuse_references: bool = True,
                 ceilings: CeilingsStore | None = None):
        check_device(device)
        self.device = device
        # the reference's outputs, from one evaluation of a problem to the next (harness/refcache.py)
        self.references = ReferenceCache(enabled=reuse_references)
        # Reads energy around the worker's windows (kernelpro.energy.NvmlMeter or a fake with
        # start/stop/idle_power_w/min_window_s/method); the harness does not import it.
        self.energy_meter = energy_meter
        self.cache = cache or BuildCache()
        self.pool = WorkerPool(device, spares=spares, env=build_environment(device), build_cache=self.cache.root)
        sandbox.warn_once()
        self.memory = MemoryPlan.for_device(device, spares)
        self.lane = Lane()  # overlapping evaluations share the device, but each is timed alone (harness/lane.py)
        # the device's ceilings (harness/ceilings.py), by its name: given (a search hands over the profiler's cache),
        # else measured in the reference's own evaluation on CUDA and kept, so a device is measured once
        self.ceilings: CeilingsStore = ceilings if ceilings is not None else KeptCeilings()
        # native builds and Triton precompiles in the CPU pool, ahead of the GPU (harness/buildqueue.py)
        self.builds = BuildQueue(device, self.cache, self.pool, build_workers)
        # Triton's CUDA driver helper, built once for every candidate's Triton cache (harness/tritonwarm.py)
        self.triton_driver = tritonwarm.DriverHelper.for_device(device, self.cache.root.parent)
        # candidates near the tolerance that passed their extra trials (harness/recheck.py): a search's closing
        # re-measurement of its best does not run them again
        self.rechecked: dict[tuple, tuple[float, int]] = {}

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.lane.close()  # before the workers go: an evaluation waiting for the device does not start another
        self.pool.close()
        self.builds.close()
        self.references.clear()

    # -- builds ----------------------------------------------------------------
    def prebuild(self, source: str, options: EvalOptions | None = None, problem: Problem | None = None) -> Future:
        """Start (or join) the build of a source in the CPU pool (`BuildQueue.submit`)."""
        return self.builds.submit(source, options or EvalOptions(), problem)

    # -- evaluation ------------------------------------------------------------
    def evaluate(self, problem: Problem, source: str, options: EvalOptions | None = None) -> EvalResult:
        options = options or EvalOptions(device=self.device)
        if options.device != self.device:
            raise DeviceError(f"this evaluator runs on {self.device}, not {options.device}")
        result = self._evaluate_once(problem, source, options)
        result = self._reverify_if_suspicious(problem, source, options, result)
        result = recheck.if_marginal(functools.partial(self._evaluate_once, problem, source), self.rechecked,
                                     problem, options, result)
        log.info("evaluated %s on %s: %s in %.1f s %s", result.source_sha256[:12], problem.name,
                 result.verdict.value, result.wall_s, result.phase_s)
        return result

    def _reverify_if_suspicious(self, problem, source, options, result: EvalResult) -> EvalResult:
        why = suspicion(result)
        if not why:
            return result
        second = self._evaluate_once(problem, source, options.model_copy(update={
            "seed": options.seed + 7919, "correct_trials": max(REVERIFY_TRIALS, options.correct_trials)}))
        if not second.ok:
            return second.model_copy(update={"reason": f"re-verification after {why}: {second.reason}",
                                             "flags": second.flags + ["reverification_failed"]})
        # Keep the more conservative of the two measurements, and say whether they agreed.
        kept = min(result, second, key=lambda r: r.speedup or 0.0)
        agreed = max(result.speedup, second.speedup) <= 1.5 * min(result.speedup, second.speedup)
        flags = [f for f in kept.flags if f != "under_floor"] + ["suspicious_speedup_reverified"]
        flags += ["under_floor"] if kept.floor and kept.floor.floor_ms and \
            kept.candidate.median_ms < kept.floor.floor_ms else []
        flags += [] if agreed else ["speedup_not_reproduced"]
        # The build is the first evaluation's (the second found it in the cache).
        return kept.model_copy(update={"flags": flags, "reason": f"{kept.reason} (re-verified after {why})",
                                       "build_cached": result.build_cached, "build_s": result.build_s})

    def _evaluate_once(self, problem: Problem, source: str, options: EvalOptions, alone: bool = False,
                       keep: bool = True) -> EvalResult:
        """One evaluation; `keep=False`: its reference outputs are neither taken from nor kept in the reference
        cache (a one-off seed's must not evict the search's). One that ran out of device memory while other
        evaluations, or its own output slot, held memory beside it runs again with the device to itself and no output
        slot (`alone`): the memory plan's estimates may fall short, and the slot is the harness's memory, not the
        candidate's; a verdict must not."""
        began = time.monotonic()
        base = {"tolerance": options.effective_tolerance, "device": self.device,
                "precision": options.precision, "policy": options.policy, "model_mode": options.model_mode,
                "source_sha256": source_hash(source)}
        finding = policy.check_candidate(source, problem.source, options.policy)
        if finding:
            return make_result(Verdict(finding.verdict), Phase.STATIC, finding.reason, base, began)
        entry = self.cache.entry(source)
        already_built = entry.built or entry.failure() is not None
        cached, build_s, failure = self.prebuild(source, options, problem).result()
        if already_built:  # the build happened before this evaluation asked for it
            cached, build_s = True, 0.0
        base.update(build_cached=cached if needs_native_build(source) else None, build_s=build_s)
        if failure:
            phase = Phase(failure.get("phase", "build"))
            return make_result(Verdict(failure["verdict"]), phase, failure["reason"], base, began,
                               stderr_text=failure.get("log", ""))
        outcome = Outcome(slot_withheld=RUN_AGAIN_ALONE if alone else "")
        # The reference as its own candidate (a search's root, a bench's baseline) runs the same code on the
        # same seeds: comparing its outputs with themselves proves nothing and, at KernelBench's sizes, cost
        # most of a baseline (level1/36_RMSNorm_: 103 s of 147). Its first trial runs for the sizes and the
        # signature, then it is timed (with the timing phase's own check that its results do not change).
        outcome.itself = source == reference_candidate(problem)
        key = reference_key(problem.source, options.seed, options.correct_trials, options.precision,
                            options.model_mode)
        waited = time.monotonic()  # for the reference outputs (another evaluation computing them), then for memory
        kept, claimed = (None, False) if outcome.itself or not keep else self.references.claim(key)
        reservation = self.memory.reserve(problem, alone)  # waits while other evaluations fill the GPU
        outcome.queued(time.monotonic() - waited)
        ticket = self.lane.ticket()
        try:
            ticket.share()  # waits while another evaluation is timed
        except LaneClosed as closed:
            reservation.release()
            if claimed:
                self.references.release(key)
            return make_result(Verdict.CRASH, Phase.STATIC, str(closed), base, began)
        outcome.queued(ticket.waited_s)
        worker, crowded_out = self.pool.acquire(), False
        try:
            self._drive(worker, problem, source, options, entry, outcome, (key if keep else None, kept), reservation,
                        ticket)
            return self._success(outcome, problem, source, options, base, began, worker)
        except Finished as finished:
            crowded_out = finished.out_of_memory and not alone and (reservation.crowded or outcome.slot is not None)
            result = make_result(finished.verdict, finished.phase, finished.reason, base, began,
                                 errors=finished.errors, worker=worker, outcome=outcome)
        finally:
            if claimed:
                self.references.release(key)
            self.pool.release(worker)
            ticket.release()
            reservation.release()
            outcome.slot, outcome.first_outputs = None, []  # the slot's memory goes with its last view
        if crowded_out:
            log.info("%s ran out of device memory beside other evaluations or its output slot: %s", problem.name,
                     RUN_AGAIN_ALONE)
            again = self._evaluate_once(problem, source, options, alone=True, keep=keep)
            return again.model_copy(update={"flags": again.flags + ["evaluated_alone_after_out_of_memory"]})
        return result

    def _drive(self, worker: ChannelWorker, problem: Problem, source: str, options: EvalOptions,
               entry: BuildEntry, outcome: Outcome, references: tuple[tuple, References | None],
               reservation: Reservation | None = None, ticket: Ticket | None = None) -> None:
        """Run the evaluation on the worker; `references`: (their key, or None where they are not to be kept; the
        reference outputs kept for it or None)."""
        ready, _ = self._receive(worker, STARTUP_LIMIT_S, outcome)
        outcome.info.update(device_name=ready.get("device_name", ""), torch_version=ready.get("torch", ""))
        key, kept = references
        fresh = References() if kept is None and key is not None and not outcome.itself else None
        if kept is not None:
            log.debug("%s: reference outputs kept from an earlier evaluation (%d trials)", problem.name,
                      len(kept.payloads))
        if self.triton_driver is not None:
            self.triton_driver.seed(entry.triton_cache_dir)  # before the worker copies the cache in
        worker.send({
            "problem_source": problem.source, "problem_path": str(problem.path),
            "candidate_source": source, "precision": options.precision, "seed": options.seed,
            "correct_trials": 0 if outcome.itself else options.correct_trials, "timing_trials": options.timing_trials,
            "timing_budget_s": options.timing_budget_s, "warmup_calls": options.warmup_calls,
            "stop_below_speedup": options.stop_below_speedup,
            "l2_flush_bytes": options.l2_flush_bytes, "cpu_settle_s": options.cpu_settle_s,
            "model_mode": options.model_mode, "extensions_dir": str(entry.extensions_dir),
            "triton_cache_dir": str(entry.triton_cache_dir),
            "reference_outputs": kept is None and not outcome.itself,
            "count_flops": kept is None,  # kept outputs come with their count: no FLOP counter (nor dynamo) here
            # the reference's own evaluation describes it further (output magnitudes, normalisations: the problem's
            # facts read them from that record only)
            "describe": outcome.itself,
            "sensitivity": options.sensitivity, "variants": list(options.variants),
            "candidate_trials": options.correct_trials,  # a candidate's trials (the reference's own may be none)
            "tolerance": options.effective_tolerance,
            # the torch.compile baseline's caches: read by any worker that compiles it, written back only from one
            # that ran no candidate code (harness/compilecache.py)
            "compile_cache": str(compilecache.folder(self.cache.root, problem.source))
            if "compile" in options.baselines and options.measure_time else "",
            "keep_compile_cache": outcome.itself,
            "output_slot": True,  # the worker reads the slot's offer (made on the reference's sizes) first
        })
        outcome.enter(Phase.REFERENCE)
        tolerance = options.effective_tolerance

        def go_on() -> None:  # every correctness trial passed (or none was due): time it, or stop
            if options.measure_time:
                if ticket is not None:  # the device to itself: the others' checks wait, as new evaluations do
                    waited = ticket.waited_s
                    try:
                        ticket.alone()
                    except LaneClosed as closed:
                        raise Finished(Verdict.CRASH, str(closed), outcome.phase) from None
                    outcome.queued(ticket.waited_s - waited)
                if self.pool.refill_on_acquire:  # no GPU context starts while this times
                    self.pool.settle(STARTUP_LIMIT_S, timing=worker)
                worker.send({"cmd": "time", "baselines": list(options.baselines),
                             "profile_kernels": options.policy == "strict" or options.launch_profile,
                             "kernelbench": options.kernelbench_timing,
                             "energy": bool(options.measure_energy and self.energy_meter),
                             "energy_windows": options.energy_windows,
                             "ceilings": self.ceilings.get(outcome.info.get("device_name", "")) is None})
            else:
                worker.send({"cmd": "stop"})
        while True:
            waited = time.monotonic()
            header, payload = self._receive(worker, options.limits.for_phase(outcome.phase), outcome)
            waited = time.monotonic() - waited
            kind = header["type"]
            if kind == "phase":
                outcome.enter(Phase(header["phase"]))
                if outcome.itself and outcome.phase is Phase.CORRECTNESS:
                    go_on()
            elif kind == "problem_error":
                raise ProblemError(problem.path, header["cause"])
            elif kind == "reference_sizes":  # the reference's first trial ran: its sizes, before its outputs
                outcome.sizes = {k: int(header.get(k) or 0) for k in MemorySizes.model_fields}
                timed = 1 + len(options.baselines)  # the candidate and each baseline: an output each in timing
                self._offer_slot(worker, outcome, int(header.get("outputs") or 1),
                                 self.memory.room(reservation, outcome.sizes, timed))
                if reservation is not None:
                    reservation.resize(self.memory.estimate(problem, outcome.sizes,
                                                            outcome.slot.nbytes if outcome.slot else 0, timed))
            elif kind == "reference_output":
                payload, spilled = self._reference_payload(worker, header, payload, outcome)
                if fresh is not None:
                    fresh.add(payload, header["structure"], spilled)
                outcome.references.append(self._load(payload, outcome))
                outcome.structures.append(header["structure"])
                if len(outcome.references) > 1 and outcome.degenerate is not False:
                    outcome.degenerate = compare.compare_outputs(
                        outcome.references[0], outcome.references[-1], "x", "x", tolerance,
                        details=False) is None
            elif kind == "reference_info":
                if kept is not None:  # this worker ran trial 0 only; the outputs are the earlier evaluation's
                    outcome.references, outcome.info["reference_outputs"] = kept.outputs(
                        functools.partial(self._load, outcome=outcome), self.device,
                        lambda size: self.memory.keep(size, beside=self.memory.need(problem)))
                    outcome.structures, outcome.degenerate = list(kept.structures), kept.degenerate
                elif fresh is not None and len(fresh.payloads) == options.correct_trials:
                    fresh.degenerate = outcome.degenerate
                    fresh.flops = header["flops"]
                    self.references.put(key, fresh)
                if fresh is not None:
                    self.references.release(key)  # complete (kept or not): an evaluation waiting for them goes on
                outcome.info.update(flops=kept.flops if kept is not None else header["flops"],  # kept: not counted again
                                    bytes_moved=header["bytes_moved"], signature=header.get("signature"),
                                    sensitivity=header.get("sensitivity") if options.sensitivity else None,
                                    variants={name: found for name, found in (header.get("variants") or {}).items()
                                              if name in options.variants})
            elif kind == "candidate_output":
                reported = header.get("steps") if isinstance(header.get("steps"), dict) else {}
                worked = 0.0
                for name in ("inputs", "model", "call"):  # the worker's own account: diagnostic only
                    seconds = reported.get(name)
                    if isinstance(seconds, (int, float)) and 0 <= seconds < 1e6:
                        outcome.step(name, seconds)
                        worked += seconds
                outcome.step("transfer", waited - worked)  # the rest of the wait: the outputs coming over
                checked = time.monotonic()
                repeat = bool(header.get("repeat"))
                outputs = self._outputs(header, payload, outcome, 1 if repeat else 0)
                # a repeat that came as a payload is compared with trial 0's outputs, in the slot where they went
                with self._judging(worker, "slot" in header or (repeat and outcome.first_in_slot)):
                    self._check_trial(header, outputs, outcome, tolerance)
                if header.get("trial") == 0 and not repeat:
                    outcome.first_in_slot = "slot" in header
                outcome.step("compare", time.monotonic() - checked)
                if outcome.trials_passed == options.correct_trials:
                    go_on()
            elif kind == "timing":
                final = self._outputs(header, payload, outcome, None)
                with self._judging(worker, "slot" in header):
                    outcome.timing, outcome.final = header, final_checks(final, header, tolerance)
                del final
            elif kind == "compile_cache":
                if outcome.itself:  # never from a worker that ran candidate code
                    compilecache.keep(self.cache.root, problem.source, payload)
            elif kind == "energy_ready":
                meter = self.energy_meter
                if outcome.idle_power_w is None:  # the GPU idles while the worker waits for the go
                    outcome.idle_power_w = meter.idle_power_w()
                outcome.energy_reading = meter.start()
                worker.send({"cmd": "go", "min_s": meter.min_window_s})
            elif kind == "energy_done":
                joules, seconds = self.energy_meter.stop(outcome.energy_reading)
                calls = max(1, int(header["calls"]))
                outcome.energy.setdefault(header["name"], []).append(EnergyWindow(
                    j_per_call=joules / calls, power_w=joules / seconds if seconds else 0.0, calls=calls,
                    j_per_call_above_idle=(joules - outcome.idle_power_w * seconds) / calls, window_s=seconds))
            elif kind == "verdict":
                raise Finished(Verdict(header["verdict"]), header["reason"], outcome.phase,
                               out_of_memory=bool(header.get("out_of_memory")))
            elif kind == "done":
                outcome.enter(Phase.DONE)
                return

    def _receive(self, worker: ChannelWorker, limit_s: float, outcome: Outcome) -> tuple[dict, bytes]:
        try:
            return worker.receive(limit_s)
        except channel.ChannelTimeout:
            raise Finished(Verdict.TIMEOUT, f"the {outcome.phase.value} phase ran past {limit_s:g} s",
                           outcome.phase) from None
        except channel.ChannelClosed:
            raise self._death(worker, outcome) from None

    def _death(self, worker: ChannelWorker, outcome: Outcome) -> Finished:
        status = worker.exit_status()
        if worker.killed_for:
            return Finished(Verdict.CRASH, f"in the {outcome.phase.value} phase, {worker.killed_for}", outcome.phase)
        if status is not None and status < 0:
            name = signal.Signals(-status).name
            return Finished(Verdict.CRASH, f"the worker died of {name} in the {outcome.phase.value} phase",
                            outcome.phase)
        return Finished(Verdict.RUNTIME_ERROR,
                        f"the worker exited with status {status} in the {outcome.phase.value} phase "
                        "without reporting", outcome.phase)

    def _load(self, payload: bytes, outcome: Outcome) -> list:
        try:
            return compare.load_tensors(payload)
        except compare.PayloadRejected as error:
            raise Finished(Verdict.REJECTED, str(error), outcome.phase) from None

    def _reference_payload(self, worker: ChannelWorker, header: dict, payload, outcome: Outcome) -> tuple:
        """(a trial's reference outputs as a payload this process holds, whether it went to a file): the payload that
        came, or a copy of what the worker wrote into the output slot (it waits for the copy); in a file where
        memory is short."""
        slotted = "slot" in header
        values = self._outputs(header, payload, outcome, 0) if slotted else None
        size = sum(v.nbytes for v in values if hasattr(v, "nbytes")) if slotted else len(payload)
        # the cache's share of the memory there would be without them, as it bounds what it keeps (refcache.fits)
        without = available_memory_bytes() + outcome.held_bytes
        spilled = outcome.held_bytes + size > without * self.references.memory_share
        outcome.info["reference_outputs"] = f"computed, through the {'output slot' if slotted else 'channel'}"
        if slotted:  # page-locked where it stays in memory: every evaluation moves it to the GPU again
            payload = host_payload(values, lock=not spilled and self.device == "cuda")
            del values
            outcome.slot.clear(0)  # no candidate reads the reference's outputs there
            self._tell(worker, outputslots.COMPARED)
        if spilled:
            log.debug("reference output of trial %d (%d bytes) spilled to a file", header["trial"], len(payload))
            return spill(payload), True  # every trial's reference outputs at once would not fit
        outcome.held_bytes += len(payload)
        return payload, False

    def _offer_slot(self, worker: ChannelWorker, outcome: Outcome, outputs: int, room: int | None) -> None:
        """Offer the worker an output slot for `outputs` outputs sized on the reference's (`outputslots`) where
        `room` (bytes) holds one, or say why not."""
        outcome.slot, fd, command = outputslots.offer(outcome.sizes.get("output_bytes", 0), outputs, self.device,
                                                      room, outcome.slot_withheld)
        try:
            self._tell(worker, command, fd)
        finally:
            if fd is not None:
                os.close(fd)
        outcome.info["output_slot"] = command.get("why") or (
            f"{command['regions']} x {command['region_bytes'] / 2**20:.1f} MiB on {self.device}")

    @staticmethod
    def _tell(worker: ChannelWorker, command: dict, fd: int | None = None) -> None:
        """A command (with a descriptor) for a worker that waits for it: one that is gone meanwhile (it failed to
        load the candidate, or was killed) is left to the next receive, which says how it ended."""
        try:
            if fd is None:
                worker.send(command)
            else:
                channel.send(worker.channel_socket, command, descriptor=fd)
        except (OSError, channel.ChannelClosed):
            pass

    @contextlib.contextmanager
    def _judging(self, worker: ChannelWorker, in_slot: bool):
        """The block that judges a message's outputs: where it reads the worker's output slot (`in_slot`), with the
        worker stopped throughout and told to go on after; else (payloads, which the worker cannot change) as it is."""
        if not in_slot:
            yield
            return
        with worker.paused():
            yield
        self._tell(worker, outputslots.COMPARED)

    def _outputs(self, header: dict, payload, outcome: Outcome, region: int | None) -> list:
        """A message's outputs: views of their region of the output slot (None: the whole slot) where the worker
        wrote them there, else its payload's."""
        if "slot" not in header:
            return self._load(payload, outcome)
        if outcome.slot is None:
            raise Finished(Verdict.REJECTED, "outputs said to be in an output slot that was never given",
                           outcome.phase)
        try:
            return outcome.slot.outputs(header["slot"], region)
        except compare.PayloadRejected as error:
            raise Finished(Verdict.REJECTED, str(error), outcome.phase) from None

    def _check_trial(self, header: dict, outputs: list, outcome: Outcome, tolerance: float) -> None:
        """One trial's outputs against the reference's; trial 0 comes twice, the second time from a second
        call on the same inputs, compared with the first (determinism)."""
        trial = header["trial"]
        if header.get("repeat"):
            again = compare.compare_outputs(outcome.first_outputs, outputs, header["structure"],
                                            header["structure"], tolerance, trial)
            outcome.first_outputs = []
            if again:
                raise Finished(Verdict.INCORRECT, f"a second call on the same inputs disagreed: {again.reason}",
                               Phase.CORRECTNESS, [again.stats])
            return
        if trial >= len(outcome.references):
            raise Finished(Verdict.REJECTED, f"outputs for trial {trial}, which the reference never ran",
                           Phase.CORRECTNESS)
        expected, outcome.references[trial] = outcome.references[trial], None  # its memory can go after this
        used: list[float] = []  # each passing chunk's largest share of the tolerance, from the comparison's own pass
        mismatch = compare.compare_outputs(expected, outputs, outcome.structures[trial], header["structure"],
                                           tolerance, trial, used=used)
        if mismatch:
            raise Finished(Verdict.INCORRECT, f"trial {trial}: {mismatch.reason}", Phase.CORRECTNESS,
                           [mismatch.stats])
        outcome.tolerance_used = max([outcome.tolerance_used, *used])
        if trial == 0:  # kept for the repeat (in the output slot, region 0, which the worker writes next after it)
            outcome.first_outputs = outputs
        outcome.trials_passed += 1

    def _success(self, outcome: Outcome, problem: Problem, source: str, options: EvalOptions,
                 base: dict, began: float, worker: ChannelWorker) -> EvalResult:
        flags = []
        if outcome.degenerate:
            flags.append("degenerate_problem")
        timing = outcome.timing
        if not options.measure_time or timing is None:
            return make_result(Verdict.CORRECT, Phase.CORRECTNESS,
                               "the reference itself (not timed)" if outcome.itself else "correct (not timed)",
                               base, began, worker=worker, outcome=outcome, flags=flags)
        mismatch, compiled, compile_mismatch = outcome.final
        if mismatch:
            raise Finished(Verdict.REJECTED, "results changed during timing (caching across calls?): "
                           + mismatch.reason, Phase.TIMING)
        if options.policy == "strict" and self.device == "cuda" and not policy.launched_custom_kernel(
                timing["kernels"], source):
            raise Finished(Verdict.REJECTED, "strict policy: no custom kernel ran on the GPU", Phase.TIMING)
        stats = {name: summarize(timing["device_ms"][name], timing["host_ms"][name])
                 for name in timing["device_ms"]}
        candidate, eager = stats["candidate"], stats["eager"]
        if self.device == "cuda" and candidate.median_ms > candidate.host_median_ms * 1.1 + 0.05:
            flags.append("timer_mismatch")
        compiled_stats = stats.get("compile")
        energy = None
        if set(outcome.energy) == {"eager", "candidate"}:
            meter = self.energy_meter
            limit = meter.power_limit_w() if hasattr(meter, "power_limit_w") else None
            energy = readings.energy_stats(meter.method, outcome.idle_power_w, limit, outcome.energy["eager"],
                                           outcome.energy["candidate"])
        if timing.get("stopped_early"):  # adaptive timing: it could not reach the search's best
            flags.append("timing_stopped_early")
        kernelbench = readings.kernelbench_timing(timing.get("kernelbench"))
        if timing.get("kernelbench") and kernelbench is None:
            flags.append("kernelbench_timing_failed")
        return make_result(
            Verdict.CORRECT, Phase.DONE,
            ("the reference itself, timed (no correctness trials: the same code on the same seeds), "
             if outcome.itself else "correct, ") + f"{eager.median_ms / candidate.median_ms:.3f}x vs eager",
            base, began, worker=worker, outcome=outcome, flags=flags,
            speedup=eager.median_ms / candidate.median_ms, candidate=candidate, reference=eager,
            reference_compile=compiled_stats, energy=energy, kernelbench=kernelbench,
            compile_correct=compile_mismatch is None if compiled else None,
            compile_mismatch=compile_mismatch.reason if compile_mismatch else "",
            speedup_vs_compile=compiled_stats.median_ms / candidate.median_ms if compiled_stats else None,
            floor=readings.floor(outcome.info, settle(self.ceilings, outcome.info.get("device_name", ""),
                                                      timing.get("ceilings"), outcome.itself), options.precision),
            custom_kernels=[k for k in timing["kernels"] if policy.launched_custom_kernel([k], source)],
            launch_profile=readings.launch_profile(timing.get("launch_profile"), candidate.median_ms)
            if options.launch_profile else None,
        )


def suspicion(result: EvalResult) -> str:
    """Why a correct, timed result is checked again on other seeds (more trials, another seed: a candidate that
    caches or skips work shows itself there): a speedup over SUSPICIOUS_SPEEDUP, or a time more than
    UNDER_FLOOR_MARGIN under the roofline's floor; "" where neither."""
    if not result.ok or result.candidate is None:
        return ""
    if result.speedup is not None and result.speedup > SUSPICIOUS_SPEEDUP:
        return f"speedup {result.speedup:.1f}x over {SUSPICIOUS_SPEEDUP:g}x"
    floor_ms = result.floor.floor_ms if result.floor else None
    if floor_ms is not None and result.candidate.median_ms < floor_ms * (1 - UNDER_FLOOR_MARGIN):
        return f"{result.candidate.median_ms:.4f} ms is under the floor {floor_ms:.4f} ms"
    return ""


def evaluate(problem: Problem, source: str, options: EvalOptions | None = None,
             ceilings: CeilingsStore | None = None) -> EvalResult:
    """Evaluate one candidate with a one-off evaluator (the library call behind `kernelpro eval`)."""
    options = options or EvalOptions(device=default_device())
    with Evaluator(options.device, spares=0, ceilings=ceilings) as evaluator:
        return evaluator.evaluate(problem, source, options)


__all__ = ["Evaluator", "WorkerPool", "evaluate", "default_device", "check_device", "TimingStats"]

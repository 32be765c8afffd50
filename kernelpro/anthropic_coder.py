"""The LLM coder: Anthropic Claude through the official `anthropic` SDK (Messages API, tool use).

One expansion is one conversation of at most `max_turns` model turns. The model may call
`search_cutlass` / `read_cutlass` (the code index), `run_profiler_tool` (when the search
gives it a profiler), and answers with `submit_candidate(code, plan, techniques)`; a
plain ```python block is accepted from a model that does not call tools. A submission
that fails validation (pydantic; the code must parse and define ModelNew) gets one
repair turn. The SDK retries 429 (honouring retry-after), 5xx, timeouts and dropped
connections with backoff; when retries run out, or the model stops on max_tokens or
refuses, the expansion fails (`CoderFailed`) and the search goes on.

The key comes from ANTHROPIC_API_KEY (or the `api_key` option); it is handed to the SDK
only and never logged. ANTHROPIC_BASE_URL is honoured by the SDK.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel, Field, ValidationError, field_validator

from kernelpro.coder import CoderFailed, CoderProposal, CoderRequest, CoderUnavailable
from kernelpro.harness.parsing import parse
from kernelpro.prompts import system_blocks, user_turn

DEFAULT_MODEL = "claude-sonnet-5-5"  # the newest Sonnet the SDK knows; --model / KERNELPRO_MODEL change it
#: USD per million tokens (input, output) of the models whose list price we know; cache reads cost 0.1x input,
#: cache writes 1.25x. Others: set KERNELPRO_PRICE_PER_MTOK="IN,OUT", or the cost is reported as unknown.
PRICES = {"claude-opus-4-5": (5.0, 25.0), "claude-opus-4": (15.0, 75.0), "claude-sonnet-4": (3.0, 15.0),
          "claude-haiku-4": (1.0, 5.0)}


def price_of(model: str) -> tuple[float, float] | None:
    override = os.environ.get("KERNELPRO_PRICE_PER_MTOK")
    if override:
        inp, out = (float(v) for v in override.split(","))
        return inp, out
    return next((p for prefix, p in PRICES.items() if model.startswith(prefix)), None)


class Submission(BaseModel):
    code: str = Field(min_length=1)
    plan: str = ""
    techniques: list[str] = []

    @field_validator("code")
    @classmethod
    def defines_model_new(cls, code: str) -> str:
        try:
            tree = parse(code)
        except SyntaxError as error:
            raise ValueError(f"the code does not parse: line {error.lineno}: {error.msg}") from None
        if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in ast.walk(tree)):
            raise ValueError("the code defines no class ModelNew")
        return code


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0
    cost_usd: float | None = 0.0

    def add(self, usage, model: str) -> None:
        self.requests += 1
        fresh = getattr(usage, "input_tokens", 0) or 0
        out = getattr(usage, "output_tokens", 0) or 0
        read = getattr(usage, "cache_read_input_tokens", 0) or 0
        write = getattr(usage, "cache_creation_input_tokens", 0) or 0
        self.input_tokens += fresh
        self.output_tokens += out
        self.cache_read_tokens += read
        self.cache_write_tokens += write
        price = price_of(model)
        if price is None or self.cost_usd is None:
            self.cost_usd = None  # an unknown model's price is not guessed
        else:
            self.cost_usd += (fresh * price[0] + out * price[1] + read * 0.1 * price[0]
                              + write * 1.25 * price[0]) / 1e6

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def since(self, before: "Usage") -> dict:
        """What was spent after `before` was taken (a cost is None when either side's price is unknown)."""
        now, then = self.as_dict(), before.as_dict()
        return {k: None if now[k] is None or then[k] is None else now[k] - then[k] for k in now}


def _tools(with_cutlass: bool, with_profiler: bool) -> list[dict]:
    tools = [{"name": "submit_candidate", "description": "Submit the finished candidate module (the final answer).",
              "input_schema": {"type": "object", "required": ["code", "plan", "techniques"], "properties": {
                  "code": {"type": "string", "description": "the complete Python module defining ModelNew"},
                  "plan": {"type": "string", "description": "one line: what it does and why it is faster"},
                  "techniques": {"type": "array", "items": {"type": "string"}}}}}]
    if with_cutlass:
        tools += [{"name": "search_cutlass", "description": "Search the CUTLASS/CuTe headers and examples by words "
                   "or identifiers; returns path, line, symbol and a snippet per declaration.",
                   "input_schema": {"type": "object", "required": ["query"],
                                    "properties": {"query": {"type": "string"}}}},
                  {"name": "read_cutlass", "description": "Read lines of a CUTLASS/CuTe file found by search_cutlass.",
                   "input_schema": {"type": "object", "required": ["path"], "properties": {
                       "path": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"}}}}]
    if with_profiler:
        tools.append({"name": "run_profiler_tool", "description": "Run one profiling tool (e.g. ncu_memory, "
                      "ncu_stalls, sass) on the parent candidate and get its findings in plain words.",
                      "input_schema": {"type": "object", "required": ["name"],
                                       "properties": {"name": {"type": "string"}}}})
    return tools


_FENCE = re.compile(r"```(?:python|py)?\n(.*?)```", re.S)


@dataclass
class AnthropicCoder:
    name: str = "anthropic"
    model: str = field(default_factory=lambda: os.environ.get("KERNELPRO_MODEL", DEFAULT_MODEL))
    # The planner role: a short call that picks the technique before the coder writes it. Off unless a
    # planner model is set (--planner-model / KERNELPRO_PLANNER_MODEL): then the coder's turn carries its plan.
    planner_model: str = field(default_factory=lambda: os.environ.get("KERNELPRO_PLANNER_MODEL", ""))
    api_key: str | None = None
    max_turns: int = 6
    max_tokens: int = 8192
    max_retries: int = 4
    timeout_s: float = 300.0
    profiler: Callable[[str, CoderRequest], str] | None = None  # (tool name, request) -> findings text
    use_cutlass: bool = True
    usage: Usage = field(default_factory=Usage)
    seed: int = 0  # the search passes one to every coder; the model's sampling is its own

    def __post_init__(self) -> None:
        import anthropic
        key = self.api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise CoderUnavailable("the Anthropic coder needs ANTHROPIC_API_KEY (or use --coder offline)")
        self._client = anthropic.Anthropic(api_key=key, max_retries=self.max_retries, timeout=self.timeout_s)
        self._errors = (anthropic.APIError,)
        self._index = None
        if self.use_cutlass:
            try:
                from kernelpro.cutlass_index import load_index
                self._index = load_index
            except ImportError:
                self._index = None

    # -- the conversation -------------------------------------------------------------------------
    def propose(self, request: CoderRequest) -> CoderProposal | None:
        from kernelpro.tools import TECHNIQUES
        before = Usage(**self.usage.as_dict())
        system = system_blocks(request, list(TECHNIQUES))
        tools = _tools(self._index is not None, self.profiler is not None)
        prompt = user_turn(request)
        if self.planner_model:
            prompt += "\n\nThe planner chose: " + self._plan(system, prompt, list(TECHNIQUES))
        messages: list[dict] = [{"role": "user", "content": prompt}]
        repaired = False
        for _ in range(self.max_turns):
            response = self._create(system, tools, messages)
            if response.stop_reason == "max_tokens":
                raise CoderFailed(f"the model stopped at max_tokens ({self.max_tokens}) before answering")
            if response.stop_reason == "refusal":
                raise CoderFailed("the model declined this request")
            messages.append({"role": "assistant", "content": list(response.content)})
            calls = [b for b in response.content if b.type == "tool_use"]
            if not calls:
                text = "".join(b.text for b in response.content if b.type == "text")
                fenced = _FENCE.findall(text)
                if fenced:
                    submission, problem = self._validate({"code": fenced[-1], "plan": text.strip()[:200],
                                                          "techniques": []})
                    if submission:
                        return self._proposal(submission, before)
                else:
                    problem = "no submit_candidate call and no ```python block"
                if repaired:
                    raise CoderFailed(f"invalid answer after a repair turn: {problem}")
                repaired = True
                messages.append({"role": "user", "content": f"Your answer was not usable: {problem}. "
                                                            "Call submit_candidate with the complete module."})
                continue
            results = []
            for call in calls:
                if call.name == "submit_candidate":
                    submission, problem = self._validate(call.input)
                    if submission:
                        return self._proposal(submission, before)
                    if repaired:
                        raise CoderFailed(f"invalid submission after a repair turn: {problem}")
                    repaired = True
                    results.append({"type": "tool_result", "tool_use_id": call.id, "is_error": True,
                                    "content": f"invalid submission: {problem}. Fix it and submit again."})
                else:
                    results.append(self._run_tool(call, request))
            messages.append({"role": "user", "content": results})
        raise CoderFailed(f"no candidate within {self.max_turns} model turns")

    def _plan(self, system, prompt: str, techniques: list[str]) -> str:
        """The planner's answer: one technique from the vocabulary and a one-line plan, as text for the coder."""
        ask = (prompt + "\n\nDo not write code. Answer with one JSON object: {\"technique\": one of "
               + ", ".join(techniques) + ", \"plan\": one sentence}.")
        response = self._create(system, None, [{"role": "user", "content": ask}], model=self.planner_model,
                                max_tokens=512)
        answer = "".join(b.text for b in response.content if b.type == "text")
        match = re.search(r"\{.*\}", answer, re.S)
        try:
            chosen = json.loads(match.group(0)) if match else {}
        except json.JSONDecodeError:
            chosen = {}
        technique = chosen.get("technique") if chosen.get("technique") in techniques else None
        if technique is None:
            return "(no usable plan; choose yourself)"
        return f"{technique}: {str(chosen.get('plan', ''))[:300]}"

    def _create(self, system, tools, messages, model: str | None = None, max_tokens: int | None = None):
        model = model or self.model
        extra = {"tools": tools} if tools else {}
        try:
            response = self._client.messages.create(model=model, max_tokens=max_tokens or self.max_tokens,
                                                    system=system, messages=messages, **extra)
        except self._errors as error:  # the SDK has already retried what can be retried
            raise CoderFailed(f"Anthropic API: {type(error).__name__}: {_short(error)}") from None
        self.usage.add(response.usage, model)
        return response

    def _validate(self, raw) -> tuple[Submission | None, str]:
        if not isinstance(raw, dict):
            return None, "the tool input is not a JSON object"
        try:
            return Submission.model_validate(raw), ""
        except ValidationError as error:
            first = error.errors()[0]
            return None, f"{'.'.join(map(str, first['loc'])) or 'input'}: {first['msg']}"

    def _proposal(self, submission: Submission, before: Usage) -> CoderProposal:
        from kernelpro.tools import TECHNIQUES
        techniques = tuple(t for t in submission.techniques if t in TECHNIQUES) or ("algebraic_simplify",)
        rationale = submission.plan.splitlines()[0][:200] if submission.plan else "LLM candidate"
        return CoderProposal(source=submission.code, techniques=techniques, rationale=rationale,
                             move="llm:" + "+".join(techniques),
                             state={"plan": submission.plan[:1000], "model": self.model,
                                    "usage": self.usage.since(before)})  # this expansion's tokens and cost

    def _run_tool(self, call, request: CoderRequest) -> dict:
        args = call.input if isinstance(call.input, dict) else {}
        try:
            if call.name == "search_cutlass" and self._index is not None:
                from kernelpro.cutlass_index import by_file, device_arch
                hits = self._index().search(str(args.get("query", "")), 8, arch=device_arch())
                text = json.dumps([{"path": path, "declarations": [{"line": h.line, "symbol": h.symbol,
                                                                    "snippet": h.snippet} for h in found]}
                                   for path, found in by_file(hits)])
            elif call.name == "read_cutlass" and self._index is not None:
                start = args.get("start")
                first, lines = self._index().show(str(args.get("path", "")), int(start) if start else None, 80)
                end = args.get("end")
                if end and start:
                    lines = lines[:max(1, int(end) - first + 1)]
                text = "\n".join(f"{n}: {line}" for n, line in enumerate(lines[:400], start=first))
            elif call.name == "run_profiler_tool" and self.profiler is not None:
                text = self.profiler(str(args.get("name", "")), request)
            else:
                return {"type": "tool_result", "tool_use_id": call.id, "is_error": True,
                        "content": f"unknown tool {call.name!r}"}
        except Exception as error:  # a tool's failure is the model's information, not the search's end
            return {"type": "tool_result", "tool_use_id": call.id, "is_error": True,
                    "content": f"{type(error).__name__}: {_short(error)}"}
        return {"type": "tool_result", "tool_use_id": call.id, "content": text[:20000]}


def _short(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]

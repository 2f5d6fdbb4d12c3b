"""Testing helpers: a scripted model and an offline agent loop.

``ScriptedModel`` replays a fixed list of turns, so an agent loop runs with no network and no
API key; ``run_loop`` is that loop: ask the model, run every tool call of its turn through the
dispatcher, feed the results back, stop at a text turn or after ``max_steps``.
"""

from __future__ import annotations

import concurrent.futures
import difflib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .dispatch import dispatch, render_result

__all__ = [
    "ScriptedModel",
    "LoopResult",
    "StepRecord",
    "assert_tool_schema",
    "run_loop",
    "text",
    "tool_calls",
]


def text(content: str) -> dict[str, Any]:
    """A final-answer turn: ``{"type": "text", "text": content}``."""
    return {"type": "text", "text": content}


def tool_calls(*calls: Mapping[str, Any]) -> dict[str, Any]:
    """A turn asking for one or more tool calls at once: ``{"type": "tool_use", "calls": [...]}``.
    Each call is ``{"id", "name", "input"}``."""
    return {"type": "tool_use", "calls": [dict(c) for c in calls]}


class ScriptedModel:
    """A stand-in for a model: returns the scripted turns in order, then a text turn saying the
    script is exhausted. ``requests`` records what the loop sent: ``(messages, tools)`` per turn.
    """

    def __init__(self, turns: Iterable[Mapping[str, Any]]) -> None:
        self._turns = [dict(t) for t in turns]
        self.requests: list[tuple[list[dict[str, Any]], list[Any]]] = []

    def __call__(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> dict[str, Any]:
        self.requests.append(([dict(m) for m in messages], list(tools)))
        if self._turns:
            return self._turns.pop(0)
        return text("(the script has no more turns)")

    @property
    def remaining(self) -> int:
        """How many scripted turns have not been played yet."""
        return len(self._turns)


@dataclass
class StepRecord:
    """One tool call the loop ran: the step, the call, its envelope and the rendered text."""

    step: int
    call: dict[str, Any]
    envelope: dict[str, Any]
    rendered: str


@dataclass
class LoopResult:
    """How a loop ended: the final text (or ``"(step limit reached)"``), the message history
    and every tool call run."""

    answer: str
    messages: list[dict[str, Any]]
    steps: list[StepRecord] = field(default_factory=list)
    reached_limit: bool = False


def run_loop(
    model: Callable[[Sequence[Mapping[str, Any]], Sequence[Any]], Mapping[str, Any]],
    registry: Any,
    prompt: str,
    max_steps: int = 6,
    *,
    ctx: Any = None,
    max_result_chars: int | None = None,
) -> LoopResult:
    """Run an agent loop offline. Each model turn is ``{"type": "text", "text"}`` (the answer)
    or ``{"type": "tool_use", "calls": [...]}``; the calls of one turn run concurrently and their
    results go back in call order as one user message of ``tool_result`` blocks (Anthropic shape).
    Stops at a text turn or after ``max_steps`` model turns."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    tools = registry.schemas()
    limit = max_result_chars or getattr(registry, "max_result_chars", None) or 2000
    steps: list[StepRecord] = []
    for step in range(max_steps):
        turn = model(messages, tools)
        if turn.get("type") == "text":
            messages.append({"role": "assistant", "content": turn["text"]})
            return LoopResult(turn["text"], messages, steps)
        calls = [dict(c) for c in turn.get("calls", [])]
        messages.append({"role": "assistant", "content": calls})
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(calls))) as pool:
            envelopes = list(pool.map(lambda c: dispatch(c, registry, ctx=ctx), calls))
        results = []
        for call, env in zip(calls, envelopes):
            t = registry.get(call.get("name")) if call.get("name") in registry else None
            rendered = render_result(env, max_chars=getattr(t, "max_result_chars", None) or limit)
            steps.append(StepRecord(step, call, env, rendered))
            results.append(
                {"type": "tool_result", "tool_use_id": call.get("id"), "content": rendered, "is_error": not env["ok"]}
            )
        messages.append({"role": "user", "content": results})
    return LoopResult("(step limit reached)", messages, steps, reached_limit=True)


def _schema_json(schema: Any) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False, default=repr)


def assert_tool_schema(tool: Any, expected: Mapping[str, Any], *, ordered: bool = False) -> None:
    """Assert that ``tool``'s input schema (``tool.schema.parameters``; a ``ToolSchema`` works
    too) equals ``expected``, a JSON Schema dict.

    Compared as dicts (key order ignored) unless ``ordered=True``, which also compares key order
    (``properties`` in signature order). On a mismatch raises ``AssertionError`` whose
    message is a unified diff of the two schemas as JSON text (indent 2, keys in their own order):
    ``-`` lines are what was expected, ``+`` lines what the tool has. A tool without a schema
    (one the model is not shown) fails too.
    """
    __tracebackhide__ = True
    schema = getattr(tool, "schema", tool)
    if schema is None or not hasattr(schema, "parameters"):
        name = getattr(tool, "name", tool)
        raise AssertionError(f"tool {name!r} has no input schema (schema=None: the model is not shown it)")
    actual = schema.parameters
    actual_text, expected_text = _schema_json(actual), _schema_json(expected)
    same = actual_text == expected_text if ordered else actual == expected
    if same:
        return
    diff = difflib.unified_diff(
        expected_text.splitlines(), actual_text.splitlines(), fromfile="expected", tofile="actual", lineterm=""
    )
    raise AssertionError(
        f"tool {getattr(schema, 'name', '?')!r}: input schema differs from expected "
        f"(- expected, + actual):\n" + "\n".join(diff)
    )

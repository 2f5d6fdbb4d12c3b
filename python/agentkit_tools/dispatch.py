"""``dispatch``: one tool call in, one envelope out, never an exception.

The lookup, validation and every envelope of the failure ladder are built by the Rust core;
this module only runs the tool body under its deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time
from typing import Any, Mapping

from . import _core
from .errors import ToolTimeoutError

__all__ = ["dispatch", "render_result", "DEFAULT_TIMEOUT_S"]

#: The deadline of a tool without its own ``timeout_s``, in seconds.
DEFAULT_TIMEOUT_S = 10.0

_clock = time.perf_counter
_ok_envelope = _core.ok_envelope

_POOL = concurrent.futures.ThreadPoolExecutor(
    max_workers=min(64, (os.cpu_count() or 2) * 8), thread_name_prefix="agentkit-tool"
)


def _run_body(tool: Any, kwargs: Mapping[str, Any], ctx: Any, timeout_s: float) -> Any:
    """Run a validated call in a worker thread (sync body) or a private event loop (async body)."""
    run_validated = getattr(tool, "run_validated", None)
    if run_validated is not None and not getattr(tool, "_is_async", False):
        # A sync FunctionTool: call the body directly in this worker thread.
        result = tool.fn(kwargs, ctx)
        if hasattr(result, "__await__"):
            result = asyncio.run(_await(result))
        return tool.check_output(result, ctx)

    async def run_async() -> Any:
        coro = run_validated(kwargs, ctx) if run_validated is not None else tool.run(kwargs, ctx)
        # Not ``wait_for``: a ``TimeoutError`` the body raises itself must stay the body's, not
        # read as our deadline expiring.
        task = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            task.cancel()
            await asyncio.wait({task})
            raise ToolTimeoutError(tool.name, timeout_s)
        return task.result()

    return asyncio.run(run_async())


async def _await(awaitable: Any) -> Any:
    return await awaitable


def dispatch(call: Mapping[str, Any], registry: Any, *, ctx: Any = None) -> dict[str, Any]:
    """Run one tool call synchronously and return its envelope; never raises.

    ``call`` is ``{"id", "name", "input"}`` (Anthropic; ``input`` a mapping or JSON text), or
    the OpenAI shapes ``{"id", "function": {"name", "arguments"}}`` and ``{"call_id", "name",
    "arguments"}``. The result is ``{"ok": True, "value": ..., "elapsed_ms": float}`` or
    ``{"ok": False, "error": {"code", "message", ...}}`` with the codes listed in docs/errors.md. The body runs
    in a worker thread under the tool's ``timeout_s`` (default 10 s): a sync body that overruns is
    abandoned, not killed (its thread finishes on its own); an async body is cancelled. A sync
    tool with the attribute ``non_blocking = True`` is called in the caller's thread instead (no
    thread hop; its deadline cannot interrupt it). A
    ``TimeoutError`` raised by the body itself is the body's failure (``internal_error``), not
    our deadline. Every exception of the body becomes an envelope, ``BaseException``s included,
    except ``KeyboardInterrupt`` and ``SystemExit``: those are requests to stop the program and
    propagate (as ``asyncio`` treats them). Stateless: approval, repeat detection, idempotency
    and retry live in ``Invoker``.
    """
    try:
        ok, tool, kwargs, core = registry._core.prepare(call)
    except Exception as exc:  # a malformed call: still an envelope, never an exception
        return {"ok": False, "error": {"code": "invalid_call", "message": f"{exc}. Send a tool call with a name and its arguments."}}
    if not ok:
        return tool  # type: ignore[no-any-return]
    timeout_s = getattr(tool, "timeout_s", None) or DEFAULT_TIMEOUT_S
    started = _clock()
    if (
        getattr(tool, "non_blocking", False) is True
        and getattr(tool, "run_validated", None) is not None
        and getattr(tool, "_is_async", True) is False
    ):
        # A sync FunctionTool declared non-blocking (pure computation): called in the caller's
        # thread, no thread hop; its deadline cannot interrupt it (as with ``Invoker(...,
        # inline=...)``). An awaitable it returns is awaited on a worker thread's own loop.
        try:
            value = tool.fn(kwargs, ctx)
            if hasattr(value, "__await__"):
                pending = _POOL.submit(asyncio.run, _await(value))
                try:
                    value = pending.result(timeout=timeout_s)
                except concurrent.futures.TimeoutError:
                    if pending.done():
                        raise
                    raise ToolTimeoutError(tool.name, timeout_s) from None
            value = tool.check_output(value, ctx)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            return _error_envelope(tool.name, exc, core)
        return _ok_envelope(value, (_clock() - started) * 1000.0)  # type: ignore[no-any-return]
    future = _POOL.submit(_run_body, tool, kwargs, ctx, timeout_s)
    try:
        # An async body enforces its own deadline (and is cancelled); the extra second only
        # guards against a loop that never yields.
        value = future.result(timeout=timeout_s if not getattr(tool, "_is_async", False) else timeout_s + 1.0)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        if isinstance(exc, concurrent.futures.TimeoutError) and not future.done():
            exc = ToolTimeoutError(tool.name, timeout_s)  # our deadline, not the body's error
        return _error_envelope(tool.name, exc, core)
    return _ok_envelope(value, (_clock() - started) * 1000.0)  # type: ignore[no-any-return]


def _error_envelope(tool_name: str, exc: BaseException, core: Any) -> dict[str, Any]:
    """The envelope of a failed call; an exception too broken to describe (its attributes
    raise) still yields an ``internal_error`` envelope."""
    try:
        return _core.error_envelope(tool_name, exc, core)  # type: ignore[no-any-return]
    except Exception:
        broken = RuntimeError(f"{type(exc).__qualname__} (its details cannot be read)")
        return _core.error_envelope(tool_name, broken, None)  # type: ignore[no-any-return]


def render_result(result: Any, *, max_chars: int = 2000) -> str:
    """Render a tool result (or envelope) as text for the model.

    A ``str`` is used as it is; an agent or workflow result (an object with ``.output`` or
    ``.outputs``) renders that; anything else becomes JSON (non-JSON values via ``str``,
    non-ASCII kept). Text over ``max_chars`` characters is cut (never inside a character) and
    ends with a notice telling the model to narrow its arguments; the notice counts toward the
    limit.
    """
    if not isinstance(result, str | Mapping | list | tuple | int | float | bool) and result is not None:
        if hasattr(result, "output"):
            result = result.output
        elif isinstance(getattr(result, "outputs", None), Mapping):
            # A workflow's terminal outputs: one `key: value` line each (as the reference does).
            result = "\n".join(f"{k}: {v if isinstance(v, str) else _json_text(v)}" for k, v in result.outputs.items())
        elif hasattr(result, "outputs"):
            result = result.outputs
    if isinstance(result, str):
        text = result
    else:
        try:
            text = json.dumps(result, default=_text, ensure_ascii=False)
        except (ValueError, RecursionError):  # a circular or too deeply nested value
            text = _text(result)
    return _core.truncate(text, max_chars)  # type: ignore[no-any-return]


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value, default=_text, ensure_ascii=False)
    except (ValueError, RecursionError):
        return _text(value)


def _text(value: Any) -> str:
    """``str(value)``, or a placeholder naming its type when even that fails (a broken
    ``__str__``, a value nested too deeply to print)."""
    try:
        return str(value)
    except Exception:  # RecursionError included
        return f"<{type(value).__qualname__} object that cannot be rendered as text>"

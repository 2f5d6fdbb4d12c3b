"""``dispatch``: one tool call in, one envelope out, never an exception.

The lookup, validation and every envelope of the failure ladder are built by the Rust core;
the body runs the way it does under the Invoker (``agentkit_tools._runner``): a sync body on the
process's worker pool, an async body (and an async approver) on one long-lived event loop kept
for synchronous callers, so clients bound to that loop (a Redis connection pool) keep working
from one call to the next.
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import re
import logging
import time
from typing import Any, Mapping

from . import _core
from ._runner import _PLAIN, BodyFailed, is_function_tool, run_body, run_on_background_loop, run_sync_in_worker
from .errors import ToolTimeoutError
from .invoker import error_envelope as _error_envelope
from .middleware import host_approved

__all__ = ["dispatch", "render_result", "DEFAULT_TIMEOUT_S"]

#: The deadline of a tool without its own ``timeout_s``, in seconds.
DEFAULT_TIMEOUT_S = 10.0

_clock = time.perf_counter
_ok_envelope = _core.ok_envelope
_log = logging.getLogger("agentkit_tools.middleware")
_STOP = (KeyboardInterrupt, SystemExit)
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Values ``render_result`` renders themselves (never their ``.output``/``.outputs``); built once,
#: not per call (a union built in the ``isinstance`` check cost more than the rest of the render).
_RENDERED_AS_IS = (str, collections.abc.Mapping, list, tuple, int, float, bool)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _approved(tool: Any, call: Any, kwargs: Any, ctx: Any, approver: Any) -> bool:
    """The approval gate, as the Invoker's ``approval`` middleware applies it."""
    call_id = call.get("id", call.get("call_id")) if isinstance(call, dict) else None
    if host_approved(call, ctx, tool.name, call_id):
        return True
    if approver is None:
        return False
    try:
        answer = approver(tool, kwargs, ctx)
        if inspect.isawaitable(answer):
            answer = run_on_background_loop(_await(answer))
    except Exception:
        _log.exception("approver %r failed: the call of %s is refused", approver, tool.name)
        return False
    return answer is True  # only the boolean True approves


def dispatch(call: Mapping[str, Any], registry: Any, *, ctx: Any = None, approver: Any = None) -> dict[str, Any]:
    """Run one tool call synchronously and return its envelope; never raises.

    ``call`` is ``{"id", "name", "input"}`` (Anthropic; ``input`` a mapping or JSON text), or
    the OpenAI shapes ``{"id", "function": {"name", "arguments"}}`` and ``{"call_id", "name",
    "arguments"}``. The result is ``{"ok": True, "value": ..., "elapsed_ms": float}`` or
    ``{"ok": False, "error": {"code", "message", ...}}`` with the codes listed in docs/errors.md.

    Steps: look the tool up, validate the arguments, the approval gate, run the body under the
    tool's ``timeout_s`` (default 10 s), check the output. A ``requires_approval`` tool runs only
    when the call carries ``"approved": True`` (a key of the call, set by the host), when
    ``ctx.approvals`` names the tool or the call id, or when ``approver(tool, args, ctx)`` (sync
    or async) returns ``True``; otherwise the envelope is ``approval_required``.

    A sync body runs on a worker thread (a tool with ``non_blocking = True`` in the caller's
    thread); at its deadline the envelope is ``timeout`` and the thread is left to finish on its
    own, its result discarded. An async body runs on a long-lived event loop of the process and is
    cancelled at its deadline, without the caller waiting for its clean-up. A ``TimeoutError``
    raised by the body itself is the body's failure, not our deadline. Every exception becomes an
    envelope, ``BaseException`` subclasses included, except ``KeyboardInterrupt`` and ``SystemExit``
    (the process is being stopped). Stateless: repeat detection, idempotency and retry need
    state and live in ``Invoker``.
    """
    try:
        ok, tool, kwargs, core = registry._core.prepare(call)
    except Exception as exc:  # a malformed call: still an envelope, never an exception
        return _core.invalid_call_envelope(str(exc))  # type: ignore[no-any-return]
    if not ok:
        return tool  # type: ignore[no-any-return]
    name = tool.name
    try:
        if getattr(tool, "requires_approval", False) and not _approved(tool, call, kwargs, ctx, approver):
            return _core.approval_envelope(name, _core.canonical_args(kwargs)[0])  # type: ignore[no-any-return]
        timeout_s = getattr(tool, "timeout_s", None) or DEFAULT_TIMEOUT_S
        started = _clock()
        if is_function_tool(tool) and getattr(tool, "_is_async", True) is False:
            if getattr(tool, "non_blocking", False) is True:
                try:
                    value = tool.fn(kwargs, ctx)
                except Exception:
                    raise
                except BaseException as exc:
                    raise exc if isinstance(exc, _STOP) else BodyFailed(exc) from None
            else:
                value = run_sync_in_worker(tool.fn, kwargs, ctx, timeout_s, name)
            if type(value) not in _PLAIN and inspect.isawaitable(value):
                left = timeout_s - (_clock() - started)
                if left <= 0:
                    raise ToolTimeoutError(name, timeout_s)
                value = run_on_background_loop(_finish_awaitable(tool, value, left), left, name)
            elif _clock() - started > timeout_s:
                raise ToolTimeoutError(name, timeout_s)  # nothing past the deadline is a success
            value = tool.check_output(value, ctx)
        else:
            value = run_on_background_loop(run_body(tool, kwargs, ctx, timeout_s), timeout_s, name)
    except Exception as exc:
        return _error_envelope(name, exc, core)
    except BaseException as exc:
        if isinstance(exc, _STOP):
            raise
        return _error_envelope(name, exc, core)
    return _ok_envelope(value, (_clock() - started) * 1000.0)  # type: ignore[no-any-return]


async def _finish_awaitable(tool: Any, awaitable: Any, limit: float) -> Any:
    from ._runner import _await_coro

    return await _await_coro(_await(awaitable), limit, tool.name)


def render_result(result: Any, *, max_chars: int = 2000) -> str:
    """Render a tool result (or envelope) as text for the model.

    A ``str`` is used as it is; an agent or workflow result (an object with ``.output`` or
    ``.outputs``) renders that; anything else becomes JSON (non-JSON values via ``str``,
    non-ASCII kept). Text over ``max_chars`` characters is cut (never inside a character) and
    ends with a notice telling the model to narrow its arguments; the notice counts toward the
    limit.
    """
    if result is not None and not isinstance(result, _RENDERED_AS_IS):
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
    try:
        return _core.truncate(text, max_chars)  # type: ignore[no-any-return]
    except UnicodeEncodeError:  # a lone surrogate (not text): shown as U+FFFD, never an exception
        return _core.truncate(_SURROGATE.sub("\ufffd", text), max_chars)  # type: ignore[no-any-return]


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

"""``dispatch``: one tool call in, one envelope out, never an exception.

The same call pipeline as the ``Invoker`` (lookup, validation, the approval gate, the deadline;
see ``agentkit_tools.invoker``), driven on the caller's thread: a sync body on the process's
worker pool (the caller waits up to the deadline), an async body and an async approver on one
long-lived event loop kept for synchronous callers, so clients bound to that loop (a Redis
connection pool) keep working from one call to the next.
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import logging
import re
from typing import Any, Mapping

from . import _core
from ._runner import _as_coro, run_body_sync, run_on_background_loop, unwrap
from .middleware import approval, timeout

__all__ = ["dispatch", "render_result", "DEFAULT_TIMEOUT_S"]

#: The deadline of a tool without its own ``timeout_s``, in seconds.
DEFAULT_TIMEOUT_S = 10.0

_log = logging.getLogger("agentkit_tools.middleware")
_STOP = (KeyboardInterrupt, SystemExit)
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Values ``render_result`` renders themselves (never their ``.output``/``.outputs``); built once,
#: not per call (a union built in the ``isinstance`` check cost more than the rest of the render).
_RENDERED_AS_IS = (str, collections.abc.Mapping, list, tuple, int, float, bool)


#: The rules of ``dispatch``: the approval gate (the approver is the call's) and the deadline.
_PIPELINE = _core.Pipeline([("approval", approval(True)), ("timeout", timeout(DEFAULT_TIMEOUT_S))], "dispatch", False)


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
        m, step, arg = _PIPELINE.begin(registry._core, call, ctx)
    except Exception as exc:  # a context or tool attribute that fails to read: still an envelope
        _log.exception("dispatch failed on a call")
        return _core.fault_envelope(exc)  # type: ignore[no-any-return]
    while step != _core.STEP_DONE:
        if step == _core.STEP_RUN:
            tool, args, limit, kind = arg
            try:
                value = run_body_sync(tool, args, ctx, limit, kind)
            except BaseException as exc:
                if isinstance(exc, _STOP):
                    raise
                step, arg = m.failed(unwrap(exc))
            else:
                step, arg = m.ok(value)
        else:  # the approval gate: the host has not approved this call
            _, tool, args = arg
            answer = False
            if approver is not None:
                try:
                    answer = approver(tool, args, ctx)
                    if inspect.isawaitable(answer):
                        answer = run_on_background_loop(_as_coro(answer))
                except BaseException as exc:
                    if isinstance(exc, _STOP):
                        raise
                    answer = False
                    _log.exception(_core.APPROVER_FAILED, approver, tool.name)
            step, arg = m.feed(_core.EV_APPROVED, answer)
    return arg  # type: ignore[no-any-return]


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
    text = result if isinstance(result, str) else _json_text(result)
    try:
        return _core.truncate(text, max_chars)  # type: ignore[no-any-return]
    except UnicodeEncodeError:  # a lone surrogate (not text): shown as U+FFFD, never an exception
        return _core.truncate(_SURROGATE.sub("\ufffd", text), max_chars)  # type: ignore[no-any-return]


def _json_text(value: Any) -> str:
    """``value`` as JSON text (non-JSON values via :func:`_text`, non-ASCII kept), or
    :func:`_text` of it when it is circular or nested too deeply for JSON."""
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

"""``as_tool``: an agent, a workflow or any other runnable as a tool.

Composition: a coordinator agent calls a sub-agent the way it calls any tool. The runnable is
anything with ``async run(task, ctx)``; the tool takes one ``task`` string, runs the runnable on
a child context (its own run id, so repeat detection and idempotency are scoped to the sub-run)
and hands its result back to the model as text.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from typing import Any, Callable, Mapping

from . import _core
from .dispatch import render_result
from .errors import ToolDefinitionError
from .schema import ToolSchema
from .tools import FunctionTool, check_tool_options

__all__ = ["as_tool", "TASK_DESCRIPTION"]

#: The description of the ``task`` argument the model fills in.
TASK_DESCRIPTION = (
    "The complete task in plain language, with every detail needed to do it: the sub-run does "
    "not see this conversation."
)


_TASK_SCHEMA = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": TASK_DESCRIPTION}},
    "required": ["task"],
    "additionalProperties": False,
}


def _docstring(runnable: Any) -> str | None:
    """The runnable's own docstring (its class's for an instance), skipping the signature text
    ``dataclasses`` writes for a class without one."""
    doc = getattr(runnable, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    cls = runnable if isinstance(runnable, type) else type(runnable)
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return None
    return doc


def _label(runnable: Any) -> str:
    own = getattr(runnable, "name", None)
    if isinstance(own, str) and own.strip():
        return own.strip()
    cls = runnable if isinstance(runnable, type) else type(runnable)
    return cls.__name__


def as_tool(
    runnable: Any,
    *,
    name: str,
    description: str = "",
    side_effecting: bool = False,
    requires_approval: bool = False,
    render: Callable[[Any], str] | None = None,
    timeout_s: float | None = None,
) -> FunctionTool:
    """Wrap anything with ``async run(task, ctx)`` (an agent, a workflow, another registry's
    loop) as a ``FunctionTool`` taking one required ``task`` string.

    The input schema is ``{"type": "object", "properties": {"task": {"type": "string",
    "description": TASK_DESCRIPTION}}, "required": ["task"], "additionalProperties": false}``.
    A call runs ``await runnable.run(task, sub_ctx)`` where ``sub_ctx`` is ``ctx.child()`` when
    the run context has a ``child`` method (``ToolContext.child``: a fresh run id under the
    parent's, the same deadline and trace), else ``ctx`` itself (None outside a run). The result
    becomes the tool's value as text: ``render(result)`` when given, else ``render_result``
    (an agent/workflow result's ``.output``/``.outputs``; a ``str`` as is; anything else as
    JSON), uncut: the registry's or the tool's ``max_result_chars`` applies when the result is
    shown to the model. An exception raised by the runnable propagates out of the tool, so the
    dispatcher turns it into an error envelope (a ``ToolError``'s own code, else
    ``internal_error``).

    ``description``: what the model reads; when empty, the runnable's docstring (its text above
    a ``---`` line, without the TODO-style lines the definition rules refuse), else a sentence
    naming the runnable. There is no 30-character floor here (as in the reference);
    ``agentkit_tools.lint`` reports a short description. ``timeout_s``: the per-call deadline
    in seconds (None: the dispatcher's default, 10 s; a sub-agent usually needs more). The
    ``side_effecting`` and ``requires_approval`` flags mean what they mean for ``@tool``.

    Raises ``ToolDefinitionError``: ``runnable`` has no callable ``run``; ``name`` is outside
    ``^[a-zA-Z0-9_-]{1,64}$``; the docstring has a TODO/FIXME/XXX/HACK line the model would
    read; ``timeout_s`` is not None or a number of seconds greater than 0 and at most 2592000.
    """
    run = getattr(runnable, "run", None)
    if not callable(run):
        raise ToolDefinitionError(
            f"as_tool: {runnable!r} has no run method; pass an object with "
            "`async run(task, ctx)` (an agent, a workflow or a loop)"
        )
    _core.check_tool_name(name)
    check_tool_options(name, timeout_s)
    text = description.strip() if description else ""
    if not text:
        doc = _docstring(runnable)
        if doc is not None:
            try:
                text = _core.parse_docstring(doc)[0]
            except ValueError as exc:
                raise ToolDefinitionError(f"tool {name!r}: {exc}") from None
    if not text:
        text = (
            f"Hands a task to {_label(runnable)} and returns its final answer as text. Describe "
            "the whole task in the task argument."
        )
    # No 30-character floor here (the reference has none for as_tool): lint reports a short one.
    core = _core.CoreTool.from_schema(name, _TASK_SCHEMA, [], text)
    to_text: Callable[[Any], str] = render if render is not None else _render_uncut

    async def invoke(args: Mapping[str, Any], ctx: Any) -> str:
        child = getattr(ctx, "child", None)
        sub_ctx = child() if callable(child) else ctx
        result = run(args["task"], sub_ctx)
        if inspect.isawaitable(result):
            result = await result
        return to_text(result)

    return FunctionTool(
        name=name,
        fn=invoke,
        description=core.description,
        side_effecting=bool(side_effecting),
        schema=ToolSchema(name, core.description, core.parameters),
        requires_approval=bool(requires_approval),
        timeout_s=timeout_s,
        _core=core,
        _is_async=True,
    )


def _render_uncut(result: Any) -> str:
    return render_result(result, max_chars=sys.maxsize)

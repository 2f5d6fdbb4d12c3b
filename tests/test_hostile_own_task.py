"""A turn's body that awaits the task it runs in gets at once the RuntimeError asyncio gives a
task that awaits itself; it waited until its deadline and was answered 'CancelledError' as an
internal error instead of the timeout its deadline gives."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agentkit_tools import Invoker, ToolContext, ToolRegistry, tool

got: list[Any] = []


@tool(read_only=True, timeout_s=2)
async def selfish(x: int) -> int:
    """Await the task this body runs in, and report what that raised."""
    try:
        await asyncio.current_task()  # type: ignore[misc]
    except RuntimeError as e:
        got.append(str(e))
        raise
    return x


async def gathered_child() -> str:
    """What asyncio itself raises in a task that awaits itself."""

    async def child() -> None:
        await asyncio.current_task()  # type: ignore[misc]

    try:
        await asyncio.gather(child())
    except RuntimeError as e:
        return str(e)
    raise AssertionError("no RuntimeError")


async def test_a_turns_body_that_awaits_its_own_task_gets_asyncios_runtime_error_at_once() -> None:
    got.clear()
    asyncio_says = await gathered_child()
    assert asyncio_says.startswith("Task cannot await on itself: <Task ")
    inv = Invoker(ToolRegistry([selfish]))
    start = time.monotonic()
    envs = await inv.invoke_many(
        [{"id": "1", "name": "selfish", "input": {"x": 1}}, {"id": "2", "name": "selfish", "input": {"x": 2}}],
        ToolContext(),
    )
    assert time.monotonic() - start < 1.0  # not held until the 2 s deadline
    assert [e["error"]["code"] for e in envs] == ["internal_error", "internal_error"]
    for env, said in zip(envs, got):
        assert said.startswith("Task cannot await on itself: <Task ")
        assert env["error"]["message"] == (
            f"selfish failed: RuntimeError: {said}. This is a bug in the tool, not in your arguments; do not retry."
        )
    assert len(got) == 2


async def test_a_call_alones_body_that_awaits_its_own_task_gets_the_same_runtime_error() -> None:
    """In `invoke` the body's task is its stand-in (`asyncio.current_task()` during its steps),
    which could not be awaited at all: the body got a TypeError ('can't be used in 'await'
    expression') instead of the RuntimeError a turn's body and asyncio's own tasks get."""
    got.clear()
    inv = Invoker(ToolRegistry([selfish]))
    start = time.monotonic()
    env = await inv.invoke({"id": "1", "name": "selfish", "input": {"x": 1}}, ToolContext())
    assert time.monotonic() - start < 1.0
    [said] = got
    assert said == "Task cannot await on itself: <BodyTask tool body selfish pending>"
    assert env == {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": (
                f"selfish failed: RuntimeError: {said}. This is a bug in the tool, not in your arguments; do not retry."
            ),
        },
    }


async def test_a_body_task_awaited_from_another_task_is_refused_as_before() -> None:
    """Only its own body is told it awaits itself: the stand-in is no future another task can
    wait on."""
    seen: list[Any] = []

    @tool(read_only=True, timeout_s=2)
    async def hands_out(x: int) -> int:
        """Hand this body's task to another task, which awaits it, and report what it got."""
        me = asyncio.current_task()

        async def other() -> None:
            try:
                await me  # type: ignore[misc]
            except TypeError as e:
                seen.append(str(e))

        await asyncio.create_task(other())
        return x

    inv = Invoker(ToolRegistry([hands_out]))
    env = await inv.invoke({"id": "1", "name": "hands_out", "input": {"x": 3}}, ToolContext())
    assert env["ok"] is True and env["value"] == 3
    assert seen == ["object agentkit_tools._core.BodyTask can't be used in 'await' expression"]

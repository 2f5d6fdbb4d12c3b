"""The rules of the default Invoker chain as a user meets them: fresh memory reads, visible
deduplication, the idempotency window, a repeat guard that stops real loops, approval on every
path, one side effect across workers, and tools whose effects nobody declared.

Everything here goes through the public API (``Invoker``, ``dispatch``, the middleware
constructors, the round-trip helpers, the MCP server through the official ``mcp`` client).
Redis cases read ``AGENTKIT_TEST_REDIS_URL`` and skip without it (``scripts/test`` starts one).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentkit_tools import (
    FileTool,
    FunctionTool,
    InMemoryFiles,
    Invoker,
    StoreFiles,
    ToolContext,
    ToolError,
    ToolRegistry,
    dispatch,
    middleware as mw,
    tool,
)
from agentkit_tools.roundtrip import (
    anthropic_tool_results,
    openai_chat_tool_results,
    openai_responses_tool_results,
    tool_result_text,
)

from memory_fixtures import NO_REDIS, REDIS_URL, STORE_KINDS, open_store, unique_namespace

ROOT = Path(__file__).resolve().parent.parent
F = "/memories/notes.md"


def body_of(env: dict[str, Any]) -> dict[str, Any]:
    """An envelope without its timing (checked to be a non-negative float)."""
    out = dict(env)
    if out.get("ok"):
        elapsed = out.pop("elapsed_ms")
        assert isinstance(elapsed, float) and elapsed >= 0.0, env
    return out


def repeated(name: str) -> dict[str, Any]:
    return {
        "ok": False,
        "error": {
            "code": "repeated_call",
            "message": (
                f"{name} has now been called 3 times with these same arguments in this conversation, and it "
                "was not run again. Stop calling it; explain the problem to the user instead."
            ),
            "tool": name,
            "count": 3,
        },
    }


# ------------------------------------------------------------------ memory: fresh reads
# The memory tool shows a file with 1-based line numbers, as Anthropic's memory-tool reference
# does: the number right-aligned in six columns, a tab, the line.


def test_file_tool_says_which_calls_are_read_only():
    memory = FileTool()
    assert memory.is_read_only_call({"command": "view", "path": "/memories"}) is True
    assert memory.is_read_only_call({"command": "view", "path": F, "view_range": [1, 2]}) is True
    for args in (
        {"command": "create", "path": F, "file_text": "x"},
        {"command": "str_replace", "path": F, "old_str": "a", "new_str": "b"},
        {"command": "insert", "path": F, "insert_line": 0, "insert_text": "x"},
        {"command": "delete", "path": F},
        {"command": "rename", "old_path": F, "new_path": "/memories/b.md"},
    ):
        assert memory.is_read_only_call(args) is False, args


class Payments:
    """A third-party tool (not a FunctionTool) with a per-call effects hook."""

    name = "pay"
    side_effecting = True
    idempotent = False
    requires_approval = False
    caps: tuple = ()
    url_arg = None
    timeout_s = None
    max_result_chars = None
    output_schema = None
    description = "Pay an invoice by its id, or look one up; paying moves money."

    def __init__(self, hook: Any) -> None:
        from agentkit_tools import ToolSchema

        self.schema = ToolSchema(
            "pay",
            self.description,
            {
                "type": "object",
                "properties": {"invoice": {"type": "string"}, "lookup": {"type": "boolean"}},
                "required": ["invoice"],
                "additionalProperties": False,
            },
        )
        self.hook = hook
        self.runs: list[str] = []

    def is_read_only_call(self, args: Any) -> Any:
        return self.hook(args)

    async def run(self, args: Any, ctx: Any = None) -> str:
        self.runs.append(args["invoice"])
        return f"paid {args['invoice']}" if not args.get("lookup") else f"{args['invoice']} is open"


def _coroutine_hook(args: Any) -> Any:
    async def answer() -> bool:
        return bool(args.get("lookup"))

    return answer()


def _raising_hook(args: Any) -> Any:
    raise RuntimeError("hook broken")


@pytest.mark.parametrize(
    "hook",
    [lambda args: bool(args.get("lookup")), _coroutine_hook, _raising_hook, lambda args: "no"],
    ids=["bool", "coroutine", "raises", "truthy-string"],
)
async def test_a_third_party_effects_hook_fails_safe(hook):
    """``is_read_only_call`` answering anything but a plain bool (an async method's coroutine, a
    string, an exception) must not make a paying call read-only: the tool's ``side_effecting``
    flag decides, so the repeat is deduplicated and the payment runs once."""
    import warnings

    pay = Payments(hook)
    inv = Invoker(ToolRegistry([pay]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the never-awaited coroutine
        first = await inv.invoke(c("pay", 1, invoice="I-1"))
        second = await inv.invoke(c("pay", 2, invoice="I-1"))
    assert body_of(first) == {"ok": True, "value": "paid I-1"}
    assert body_of(second) == {"ok": True, "value": "paid I-1", "deduplicated": True}
    assert pay.runs == ["I-1"]


async def test_a_third_party_read_only_call_is_never_deduplicated():
    pay = Payments(lambda args: bool(args.get("lookup")))
    inv = Invoker(ToolRegistry([pay]))
    envs = [await inv.invoke(c("pay", i, invoice="I-1", lookup=True)) for i in range(2)]
    assert [body_of(e) for e in envs] == [{"ok": True, "value": "I-1 is open"}] * 2
    assert pay.runs == ["I-1", "I-1"]


async def test_an_effects_hook_set_on_a_function_tool_instance_decides():
    """A hook assigned to a ``FunctionTool`` instance (not defined by a class) is found like a
    class's: the lookups are read-only (never deduplicated), the payment is deduplicated; the hook
    gets the arguments frozen."""
    runs: list[str] = []
    seen: list[str] = []

    @tool(side_effecting=True)
    def pay(invoice: str, lookup: bool = False, tags: list[str] | None = None) -> str:
        """Pay an invoice by its id, or look one up without paying it."""
        runs.append(invoice)
        return f"{invoice} is open" if lookup else f"paid {invoice}"

    def hook(args: Any) -> bool:
        seen.append(type(args).__name__)
        return bool(args.get("lookup"))

    pay.is_read_only_call = hook  # type: ignore[attr-defined]
    inv = Invoker(ToolRegistry([pay]))
    envs = [await inv.invoke(c("pay", i, invoice="I-1", lookup=True)) for i in range(2)]
    envs += [await inv.invoke(c("pay", i, invoice="I-2", tags=["x"])) for i in range(2, 4)]
    assert [body_of(e) for e in envs] == [
        {"ok": True, "value": "I-1 is open"},
        {"ok": True, "value": "I-1 is open"},
        {"ok": True, "value": "paid I-2"},
        {"ok": True, "value": "paid I-2", "deduplicated": True},
    ]
    assert runs == ["I-1", "I-1", "I-2"]
    assert seen == ["FrozenDict"] * 4


@pytest.fixture(params=["files", *STORE_KINDS])
async def memory_tool(request, tmp_path):
    """``(FileTool, read_files)`` on InMemoryFiles and on StoreFiles over every store;
    ``read_files()`` returns the backend's ``{path: text}``."""
    if request.param == "files":
        backend = InMemoryFiles()

        async def read() -> dict[str, str]:
            return backend.files()

        yield FileTool(backend), read
        return
    async with open_store(request.param, tmp_path) as store:
        files = StoreFiles(store, namespace=unique_namespace())
        yield FileTool(files), files.files


async def test_memory_sequence_reads_fresh_through_default_invoker(memory_tool):
    memory, read_files = memory_tool
    inv = Invoker(ToolRegistry([memory]))
    ctx = ToolContext(run_id=f"mem-{uuid.uuid4().hex}")
    n = iter(range(1000))

    async def call(**args: Any) -> dict[str, Any]:
        return await inv.invoke({"id": f"m{next(n)}", "name": "memory", "input": args}, ctx)

    view = {"command": "view", "path": F}
    created = await call(command="create", path=F, file_text="alpha\nbeta\n")
    assert created["ok"] is True and "deduplicated" not in created, created

    first = await call(**view)
    assert first["ok"] is True and "deduplicated" not in first, first
    assert first["value"] == "     1\talpha\n     2\tbeta"

    edited = await call(command="str_replace", path=F, old_str="alpha", new_str="gamma")
    assert edited["ok"] is True and "deduplicated" not in edited, edited

    second = await call(**view)  # the same arguments as the first view: must read the edit
    assert second["ok"] is True and "deduplicated" not in second, second
    assert second["value"] == "     1\tgamma\n     2\tbeta"

    inserted = await call(command="insert", path=F, insert_line=2, insert_text="delta")
    assert inserted["ok"] is True and "deduplicated" not in inserted, inserted

    third = await call(**view)  # the third identical view: the world changed in between, it runs
    assert third["ok"] is True and "deduplicated" not in third, third
    assert third["value"] == "     1\tgamma\n     2\tbeta\n     3\tdelta"
    assert tool_result_text(third) == third["value"]
    assert await read_files() == {F: "gamma\nbeta\ndelta\n"}


async def test_memory_identical_views_with_nothing_between_still_stop_at_the_third(memory_tool):
    memory, _ = memory_tool
    inv = Invoker(ToolRegistry([memory]))
    ctx = ToolContext(run_id=f"mem-{uuid.uuid4().hex}")
    await inv.invoke({"id": "c", "name": "memory", "input": {"command": "create", "path": F, "file_text": "x\n"}}, ctx)
    view = {"name": "memory", "input": {"command": "view", "path": F}}
    envs = [await inv.invoke({"id": f"v{i}", **view}, ctx) for i in range(3)]
    assert [e["ok"] for e in envs] == [True, True, False]
    assert all("deduplicated" not in e for e in envs[:2])
    assert envs[2] == repeated("memory")


async def test_memory_repeated_create_is_deduplicated_while_its_window_is_open():
    """A side-effecting memory call keeps its deduplication: the same create sent again right
    after is not run again (and the model is told so), while a view in between does not close
    the window."""
    backend = InMemoryFiles()
    inv = Invoker(ToolRegistry([FileTool(backend)]))
    create = {"name": "memory", "input": {"command": "create", "path": F, "file_text": "x\n"}}
    a = await inv.invoke({"id": "a", **create})
    v = await inv.invoke({"id": "v", "name": "memory", "input": {"command": "view", "path": F}})
    b = await inv.invoke({"id": "b", **create})
    assert a["ok"] is True and v["ok"] is True
    assert b["ok"] is True and b["deduplicated"] is True and b["value"] == a["value"]
    assert backend.files() == {F: "x\n"}


# ------------------------------------------------------------------ visible deduplication


def make_refund() -> tuple[FunctionTool, list[tuple[str, int]]]:
    runs: list[tuple[str, int]] = []

    @tool(side_effecting=True)
    def refund(order_id: str, cents: int) -> str:
        """Refund an amount in cents on an order; the money leaves the shop's account.

        Args:
            order_id: The order, e.g. A-7.
            cents: The amount in cents.
        """
        runs.append((order_id, cents))
        return f"refunded {cents} cents on {order_id}"

    return refund, runs


REFUND_TEXT = "refunded 500 cents on A-7"


def dedup_notice(text: str, rendering: str) -> str:
    """The sentence a deduplicated result starts with: ``text`` = notice + ``rendering``, the
    notice one sentence saying that this exact call already ran and was not run again."""
    assert text.endswith(rendering) and text != rendering, (text, rendering)
    notice = text[: len(text) - len(rendering)]
    sentence = notice.strip()
    assert sentence and sentence[0].isupper() and sentence[-1] in ".:", notice
    assert re.search(r"[.!?]\s", sentence[:-1]) is None, f"more than one sentence: {notice!r}"
    low = sentence.lower()
    assert "not run again" in low, notice
    assert "already ran" in low or "already been run" in low, notice
    assert "this exact call" in low or "this same call" in low or "identical call" in low, notice
    assert "conversation" in low, notice
    return notice


async def test_refund_repeat_is_deduplicated_and_says_so():
    refund, runs = make_refund()
    inv = Invoker(ToolRegistry([refund]))
    call = {"name": "refund", "input": {"order_id": "A-7", "cents": 500}}
    first = await inv.invoke({"id": "c1", **call})
    second = await inv.invoke({"id": "c2", **call})
    assert body_of(first) == {"ok": True, "value": REFUND_TEXT}
    assert body_of(second) == {"ok": True, "value": REFUND_TEXT, "deduplicated": True}
    assert runs == [("A-7", 500)]
    assert tool_result_text(first) == REFUND_TEXT
    dedup_notice(tool_result_text(second), REFUND_TEXT)


async def test_dedup_notice_is_the_same_in_every_rendering():
    """What the model reads of the deduplicated refund: the notice then the value, the same in
    tool_result_text, the Anthropic and both OpenAI round-trips and the MCP server."""
    from mcp import Client

    from agentkit_tools.mcp_server import build_server

    refund, runs = make_refund()
    reg = ToolRegistry([refund])
    notices = []

    inv = Invoker(reg)
    for i in range(2):
        env = await inv.invoke({"id": f"t{i}", "name": "refund", "input": {"order_id": "A-7", "cents": 500}})
    notices.append(dedup_notice(tool_result_text(env), REFUND_TEXT))

    inv = Invoker(reg)
    message = {"content": [{"type": "tool_use", "id": "toolu_1", "name": "refund", "input": {"order_id": "A-7", "cents": 500}}]}
    first = await anthropic_tool_results(message, inv)
    again = await anthropic_tool_results(
        {"content": [{"type": "tool_use", "id": "toolu_2", "name": "refund", "input": {"order_id": "A-7", "cents": 500}}]}, inv
    )
    assert first == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": REFUND_TEXT}]}
    [block] = again["content"]
    assert set(block) == {"type", "tool_use_id", "content"} and block["tool_use_id"] == "toolu_2"
    notices.append(dedup_notice(block["content"], REFUND_TEXT))

    inv = Invoker(reg)
    args = '{"order_id": "A-7", "cents": 500}'
    for i in range(2):
        chat = await openai_chat_tool_results(
            {"choices": [{"message": {"tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": "refund", "arguments": args}}]}}]},
            inv,
        )
    [msg] = chat
    assert msg["role"] == "tool" and msg["tool_call_id"] == "call_1"
    notices.append(dedup_notice(msg["content"], REFUND_TEXT))

    inv = Invoker(reg)
    for i in range(2):
        items = await openai_responses_tool_results(
            {"output": [{"type": "function_call", "call_id": f"fc_{i}", "name": "refund", "arguments": args}]}, inv
        )
    [item] = items
    assert item["type"] == "function_call_output" and item["call_id"] == "fc_1"
    notices.append(dedup_notice(item["output"], REFUND_TEXT))

    # MCP: one conversation (the host's context), the same call twice
    conversation = ToolContext(run_id=f"mcp-{uuid.uuid4().hex}")
    async with Client(build_server(reg, context=lambda request_ctx: conversation)) as client:
        one = await client.call_tool("refund", {"order_id": "A-7", "cents": 500})
        two = await client.call_tool("refund", {"order_id": "A-7", "cents": 500})
    assert one.is_error is False and [c.text for c in one.content] == [REFUND_TEXT]
    assert two.is_error is False and len(two.content) == 1
    notices.append(dedup_notice(two.content[0].text, REFUND_TEXT))

    assert len(set(notices)) == 1, notices
    assert runs == [("A-7", 500)] * 5  # once per Invoker / server, never for the repeat


async def test_dedup_notice_on_a_structured_mcp_result():
    from mcp import Client

    from agentkit_tools.mcp_server import build_server

    runs = []

    @tool(side_effecting=True)
    def book_room(room: str, day: str) -> dict:
        """Book a meeting room for one whole day and return the booking.

        Args:
            room: The room's name.
            day: The day, YYYY-MM-DD.
        """
        runs.append(room)
        return {"room": room, "day": day, "booking": len(runs)}

    reg = ToolRegistry([book_room])
    conversation = ToolContext(run_id=f"mcp-{uuid.uuid4().hex}")
    async with Client(build_server(reg, context=lambda request_ctx: conversation)) as client:
        one = await client.call_tool("book_room", {"room": "Blue", "day": "2026-12-01"})
        two = await client.call_tool("book_room", {"room": "Blue", "day": "2026-12-01"})
    rendering = '{"room": "Blue", "day": "2026-12-01", "booking": 1}'
    assert one.is_error is False and [c.text for c in one.content] == [rendering]
    assert two.is_error is False and len(two.content) == 1
    dedup_notice(two.content[0].text, rendering)
    assert runs == ["Blue"]
    if one.structured_content is not None:  # the structured value itself carries no prose
        assert two.structured_content == one.structured_content == {"room": "Blue", "day": "2026-12-01", "booking": 1}


def test_tool_result_text_of_a_deduplicated_envelope():
    plain = tool_result_text({"ok": True, "value": {"id": 7}, "elapsed_ms": 0.1})
    dedup = tool_result_text({"ok": True, "value": {"id": 7}, "elapsed_ms": 0.1, "deduplicated": True})
    assert plain == '{"id": 7}'
    dedup_notice(dedup, '{"id": 7}')
    # an error envelope never carries the notice
    assert tool_result_text({"ok": False, "error": {"code": "x", "message": "boom; retry"}}) == "boom; retry"


# ------------------------------------------------------------------ the idempotency window


def shop() -> tuple[ToolRegistry, list[Any]]:
    runs: list[Any] = []

    @tool(side_effecting=True)
    def refund(order_id: str, cents: int) -> str:
        """Refund an amount in cents on an order; the money leaves the shop's account."""
        runs.append(("refund", order_id, cents))
        return f"refunded {cents} cents on {order_id}"

    @tool(side_effecting=True)
    def void_order(order_id: str) -> str:
        """Void an order that has not shipped; fails when it already shipped."""
        runs.append(("void", order_id))
        raise ToolError(f"order {order_id} already shipped; refund it instead", code="already_shipped")

    @tool(read_only=True)
    def order_status(order_id: str) -> str:
        """Look up the status of an order by its id (read-only)."""
        runs.append(("status", order_id))
        return "shipped"

    return ToolRegistry([refund, void_order, order_status]), runs


def c(name: str, i: int, **args: Any) -> dict[str, Any]:
    return {"id": f"{name}-{i}", "name": name, "input": args}


async def test_window_closes_when_another_side_effecting_call_succeeds():
    reg, runs = shop()
    inv = Invoker(reg)
    a1 = await inv.invoke(c("refund", 1, order_id="A-7", cents=500))
    b = await inv.invoke(c("refund", 2, order_id="B-1", cents=100))
    a2 = await inv.invoke(c("refund", 3, order_id="A-7", cents=500))
    assert [body_of(e) for e in (a1, b, a2)] == [
        {"ok": True, "value": "refunded 500 cents on A-7"},
        {"ok": True, "value": "refunded 100 cents on B-1"},
        {"ok": True, "value": "refunded 500 cents on A-7"},  # a new refund: the window had closed
    ]
    assert runs == [("refund", "A-7", 500), ("refund", "B-1", 100), ("refund", "A-7", 500)]


async def test_window_stays_open_across_reads_and_failures():
    reg, runs = shop()
    inv = Invoker(reg)
    a1 = await inv.invoke(c("refund", 1, order_id="A-7", cents=500))
    s = await inv.invoke(c("order_status", 2, order_id="A-7"))
    v = await inv.invoke(c("void_order", 3, order_id="A-7"))
    a2 = await inv.invoke(c("refund", 4, order_id="A-7", cents=500))
    assert body_of(s) == {"ok": True, "value": "shipped"}
    assert v == {
        "ok": False,
        "error": {"code": "already_shipped", "message": "order A-7 already shipped; refund it instead", "retriable": False},
    }
    assert body_of(a2) == {"ok": True, "value": body_of(a1)["value"], "deduplicated": True}
    assert runs == [("refund", "A-7", 500), ("status", "A-7"), ("void", "A-7")]


async def test_window_is_per_conversation():
    reg, runs = shop()
    inv = Invoker(reg)
    one, two = ToolContext(run_id="conv-1"), ToolContext(run_id="conv-2")
    e1 = await inv.invoke(c("refund", 1, order_id="A-7", cents=500), one)
    e2 = await inv.invoke(c("refund", 2, order_id="A-7", cents=500), two)
    e3 = await inv.invoke(c("refund", 3, order_id="A-7", cents=500), one)
    assert "deduplicated" not in e1 and "deduplicated" not in e2
    assert e3["deduplicated"] is True
    assert runs == [("refund", "A-7", 500)] * 2


async def test_identical_calls_in_flight_run_the_body_once():
    runs = []

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        await asyncio.sleep(0.2)
        return f"charge #{len(runs)} of {cents} on {card}"

    inv = Invoker(ToolRegistry([charge]))
    # two, not more: a third identical call in the conversation is the repeat guard's
    envs = await inv.invoke_many([c("charge", i, card="4242", cents=900) for i in range(2)])
    assert runs == ["4242"]
    assert [e["ok"] for e in envs] == [True] * 2
    assert [e["value"] for e in envs] == ["charge #1 of 900 on 4242"] * 2
    assert sorted(e.get("deduplicated", False) for e in envs) == [False, True]
    # separate conversations in flight at once are separate calls
    runs.clear()
    envs = await asyncio.gather(
        *(inv.invoke(c("charge", 9, card="4242", cents=900), ToolContext(run_id=f"conv-{i}")) for i in range(3))
    )
    assert runs == ["4242"] * 3
    assert all("deduplicated" not in e for e in envs)


async def test_failures_are_never_cached():
    outcomes = [ToolError("card declined; try another card", code="declined"), None, None]
    runs = []

    @tool(side_effecting=True)
    def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        failure = outcomes[len(runs) - 1]
        if failure is not None:
            raise failure
        return f"charged {cents} on {card}"

    inv = Invoker(ToolRegistry([charge]))
    first = await inv.invoke(c("charge", 1, card="4242", cents=900))
    second = await inv.invoke(c("charge", 2, card="4242", cents=900))
    third = await inv.invoke(c("charge", 3, card="4242", cents=900))
    assert first["ok"] is False and first["error"]["code"] == "declined"
    assert body_of(second) == {"ok": True, "value": "charged 900 on 4242"}
    assert body_of(third) == {"ok": True, "value": "charged 900 on 4242", "deduplicated": True}
    assert runs == ["4242", "4242"]


async def test_in_flight_failure_is_not_shared_with_the_waiting_call():
    runs = []

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        n = len(runs)
        await asyncio.sleep(0.1)
        if n == 1:
            raise ToolError("card declined; try another card", code="declined")
        return f"charged {cents} on {card}"

    inv = Invoker(ToolRegistry([charge]))
    envs = await inv.invoke_many([c("charge", i, card="4242", cents=900) for i in range(2)])
    assert runs == ["4242", "4242"]
    assert sorted((e["ok"], e.get("value"), e.get("error", {}).get("code")) for e in envs) == [
        (False, None, "declined"),
        (True, "charged 900 on 4242", None),
    ]


# ------------------------------------------------------------------ one side effect across workers


def shared_chain(store: Any, **idem: Any) -> list[Any]:
    return [mw.audit(), mw.approval(), mw.repeat_guard(), mw.idempotency(store=store, **idem), mw.retry(), mw.timeout()]


@pytest.mark.skipif(not REDIS_URL, reason=NO_REDIS)
async def test_two_invokers_sharing_redis_run_the_same_call_once():
    from agentkit_tools import RedisStore

    namespace = f"idem-{uuid.uuid4().hex}"
    stores = [RedisStore(REDIS_URL, namespace=namespace), RedisStore(REDIS_URL, namespace=namespace)]
    runs: list[str] = []

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        await asyncio.sleep(0.3)
        return f"charge #{len(runs)} of {cents} on {card}"

    try:
        workers = [Invoker(ToolRegistry([charge]), middleware=shared_chain(s)) for s in stores]
        for round_ in range(5):
            runs.clear()
            conversation = f"conv-{uuid.uuid4().hex}"
            call = c("charge", round_, card=f"card-{round_}", cents=900)
            envs = await asyncio.gather(*(w.invoke(dict(call), ToolContext(run_id=conversation)) for w in workers))
            assert runs == [f"card-{round_}"], (round_, runs)
            assert [e["ok"] for e in envs] == [True, True], envs
            assert [e["value"] for e in envs] == [f"charge #1 of 900 on card-{round_}"] * 2
            assert sorted(e.get("deduplicated", False) for e in envs) == [False, True]
    finally:
        keys = await stores[0].client.keys(f"{namespace}:*")
        if keys:
            await stores[0].client.delete(*keys)
        for s in stores:
            await s.aclose()


class SlowWrites:
    """A StorePort whose ``set`` is slow (a loaded server): reads and compare-and-set pass
    straight through. Whatever the store's speed, a shared call must still run once."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s

    async def get(self, key: str) -> Any:
        return await self.inner.get(key)

    async def set(self, key: str, value: str) -> None:
        await asyncio.sleep(self.delay_s)
        await self.inner.set(key, value)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def compare_and_set(self, key: str, expected: Any, value: str) -> bool:
        return await self.inner.compare_and_set(key, expected, value)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.skipif(not REDIS_URL, reason=NO_REDIS))])
async def shared_store(request):
    """One store two Invokers share (an InMemoryStore stands for a server within one process)."""
    if request.param == "memory":
        from agentkit_tools import InMemoryStore

        yield InMemoryStore()
        return
    from agentkit_tools import RedisStore

    store = RedisStore(REDIS_URL, namespace=f"idem-{uuid.uuid4().hex}")
    try:
        yield store
    finally:
        keys = await store.client.keys(f"{store.namespace}:*")
        if keys:
            await store.client.delete(*keys)
        await store.aclose()


@pytest.mark.parametrize("write_delay_s", [0.0, 0.3])
async def test_workers_sharing_a_store_run_a_call_once(shared_store, write_delay_s):
    store = SlowWrites(shared_store, write_delay_s)
    runs: list[str] = []

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        await asyncio.sleep(0.2)
        return f"charge #{len(runs)} of {cents} on {card}"

    workers = [Invoker(ToolRegistry([charge]), middleware=shared_chain(store)) for _ in range(3)]
    for round_ in range(3):
        runs.clear()
        conversation = f"conv-{uuid.uuid4().hex}"
        call = c("charge", round_, card=f"card-{round_}", cents=900)
        envs = await asyncio.wait_for(
            asyncio.gather(*(w.invoke(dict(call), ToolContext(run_id=conversation)) for w in workers)), 60
        )
        assert runs == [f"card-{round_}"], (round_, runs)
        assert [e.get("value") for e in envs] == [f"charge #1 of 900 on card-{round_}"] * 3, envs
        assert sorted(e.get("deduplicated", False) for e in envs) == [False, True, True]


async def test_the_window_is_shared_by_workers(shared_store):
    reg, runs = shop()
    a, b = (Invoker(reg, middleware=shared_chain(shared_store)) for _ in range(2))
    ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
    first = await a.invoke(c("refund", 1, order_id="A-7", cents=500), ctx)
    again_elsewhere = await b.invoke(c("refund", 2, order_id="A-7", cents=500), ctx)
    other = await b.invoke(c("refund", 3, order_id="B-1", cents=100), ctx)
    after_other = await a.invoke(c("refund", 4, order_id="A-7", cents=500), ctx)
    assert body_of(first) == {"ok": True, "value": "refunded 500 cents on A-7"}
    assert body_of(again_elsewhere) == {"ok": True, "value": "refunded 500 cents on A-7", "deduplicated": True}
    assert body_of(other) == {"ok": True, "value": "refunded 100 cents on B-1"}
    assert body_of(after_other) == {"ok": True, "value": "refunded 500 cents on A-7"}
    assert runs == [("refund", "A-7", 500), ("refund", "B-1", 100), ("refund", "A-7", 500)]


async def test_a_shared_store_deduplicates_results_that_are_not_plain_json(shared_store):
    """A tool returning a dataclass (or a dict holding a datetime) is the usual case; with a
    shared store the repeat must still not run it again, and the model must read the same
    rendering after the notice."""
    import dataclasses
    import datetime

    @dataclasses.dataclass
    class Receipt:
        order_id: str
        cents: int
        at: datetime.datetime

    runs = []

    @tool(side_effecting=True)
    def refund(order_id: str, cents: int) -> Receipt:
        """Refund an amount in cents on an order; the money leaves the shop's account."""
        runs.append(order_id)
        return Receipt(order_id, cents, datetime.datetime(2026, 12, 1, 9, 30))

    workers = [Invoker(ToolRegistry([refund]), middleware=shared_chain(shared_store)) for _ in range(2)]
    ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
    first = await workers[0].invoke(c("refund", 1, order_id="A-7", cents=500), ctx)
    same_worker = await workers[0].invoke(c("refund", 2, order_id="A-7", cents=500), ctx)
    other_worker = await workers[1].invoke(c("refund", 3, order_id="A-7", cents=500), ctx)
    assert first["ok"] is True and "deduplicated" not in first
    assert same_worker["ok"] is True and same_worker["deduplicated"] is True
    assert other_worker["ok"] is True and other_worker["deduplicated"] is True
    assert runs == ["A-7"]
    rendering = tool_result_text(first)
    notice = dedup_notice(tool_result_text(same_worker), rendering)
    # the other worker only has what the store kept: the notice, then that value's rendering
    elsewhere = tool_result_text(other_worker)
    assert elsewhere.startswith(notice) and "A-7" in elsewhere and "500" in elsewhere, elsewhere


class _Writes:
    """An in-memory store that keeps every document written (``set`` and ``compare_and_set``)."""

    def __init__(self) -> None:
        from agentkit_tools import InMemoryStore

        self.inner = InMemoryStore()
        self.written: list[Any] = []

    async def get(self, key: str) -> Any:
        return await self.inner.get(key)

    async def set(self, key: str, value: Any) -> None:
        self.written.append(value)
        await self.inner.set(key, value)

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        self.written.append(value)
        return bool(await self.inner.compare_and_set(key, expected, value))


async def test_the_text_a_shared_store_keeps_of_a_result(caplog: pytest.LogCaptureFixture) -> None:
    """Compact JSON in the result's own key order, non-ASCII kept, what JSON cannot hold as
    pydantic's JSON data (a datetime); a result that is not JSON at all (circular) is not shared
    (logged) and its claim is released."""
    import datetime
    import logging

    looped: list[Any] = []
    looped.append(looped)
    values = {"plain": {"b": "é", "a": [1, 2.5, None], "at": datetime.datetime(2026, 12, 1, 9, 30)}, "looped": looped}

    @tool(side_effecting=True)
    def keep(which: str) -> Any:
        """Keep a thing and answer what was kept."""
        return values[which]

    store = _Writes()
    inv = Invoker(ToolRegistry([keep]), middleware=shared_chain(store))
    ctx = ToolContext(run_id="conv-text")
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        assert (await inv.invoke(c("keep", 1, which="plain"), ctx))["ok"] is True
        assert (await inv.invoke(c("keep", 2, which="looped"), ctx))["ok"] is True
    done = [w for w in store.written if '"done"' in w]
    assert done == ['{"s":"done","value":{"b":"é","a":[1,2.5,null],"at":"2026-12-01T09:30:00"}}']
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("agentkit_tools.middleware", "WARNING", "a result of type list cannot be stored as JSON; not shared for deduplication")
    ]
    assert store.written[-1] == '{"s":"free"}'


WITHOUT_PYDANTIC = textwrap.dedent(
    """
    import asyncio, dataclasses, datetime, sys
    sys.modules["pydantic_core"] = None  # importing it raises ImportError: as if not installed
    from agentkit_tools import InMemoryStore, Invoker, ToolContext, ToolRegistry, middleware as mw, tool

    @dataclasses.dataclass
    class Receipt:
        order_id: str
        at: datetime.date

    class Dated:
        isoformat = "not callable"
        def __str__(self):
            return "dated as text"

    values = {
        "instance": Receipt("A-7", datetime.date(2026, 12, 1)),
        "class": Receipt,
        "datetime": datetime.datetime(2026, 12, 1, 9, 30),
        "not_callable": Dated(),
        "other": {1, 2} - {2},
    }

    class Writes(InMemoryStore):
        written = []
        async def compare_and_set(self, key, expected, value):
            self.written.append(value)
            return await super().compare_and_set(key, expected, value)

    @tool(side_effecting=True)
    def keep(which: str) -> object:
        \"\"\"Keep a thing and answer what was kept.\"\"\"
        return values[which]

    async def main():
        store = Writes()
        chain = [mw.idempotency(store=store)]
        inv = Invoker(ToolRegistry([keep]), middleware=chain)
        for which in values:
            env = await inv.invoke({"id": which, "name": "keep", "input": {"which": which}}, ToolContext(run_id="r"))
            assert env["ok"] is True, env
        for w in store.written:
            if '"done"' in w:
                print(w)

    asyncio.run(main())
    """
)


def test_the_text_a_shared_store_keeps_of_a_value_json_does_not_know_without_pydantic(tmp_path) -> None:
    """Without pydantic: a dataclass instance as its fields (a date in them as its ISO text), a
    dataclass itself (a class) and a value whose ``isoformat`` is not callable as their text, a
    datetime as its ISO text, anything else as its text."""
    script = tmp_path / "without_pydantic.py"
    script.write_text(WITHOUT_PYDANTIC)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        '{"s":"done","value":{"order_id":"A-7","at":"2026-12-01"}}',
        '{"s":"done","value":"<class \'__main__.Receipt\'>"}',
        '{"s":"done","value":"2026-12-01T09:30:00"}',
        '{"s":"done","value":"dated as text"}',
        '{"s":"done","value":"{1}"}',
    ]


CRASHING_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from agentkit_tools import Invoker, RedisStore, ToolContext, ToolRegistry, middleware as mw, tool

    @tool(side_effecting=True, timeout_s=1.0)
    async def charge(card: str, cents: int) -> str:
        \"\"\"Charge a card an amount in cents; the money is taken at once.\"\"\"
        print("started", flush=True)
        await asyncio.sleep(60)
        return "never"

    async def main(url, namespace, run_id):
        store = RedisStore(url, namespace=namespace)
        chain = [mw.audit(), mw.approval(), mw.repeat_guard(), mw.idempotency(store=store, lease_s=0.5), mw.retry(), mw.timeout()]
        inv = Invoker(ToolRegistry([charge]), middleware=chain)
        await inv.invoke({"id": "w1", "name": "charge", "input": {"card": "4242", "cents": 900}}, ToolContext(run_id=run_id))

    asyncio.run(main(*sys.argv[1:4]))
    """
)


@pytest.mark.skipif(not REDIS_URL, reason=NO_REDIS)
async def test_a_crashed_workers_claim_expires(tmp_path):
    """A worker SIGKILLed while running a claimed call: another worker's identical call waits
    for the lease to run out, then runs the body itself (and is not told it was deduplicated).
    The lease is ``idempotency(store=..., lease_s=...)``; the claim may be held longer than
    ``lease_s`` for a tool with a long ``timeout_s``, so the bound here is generous."""
    from agentkit_tools import RedisStore

    namespace = f"idem-{uuid.uuid4().hex}"
    run_id = f"conv-{uuid.uuid4().hex}"
    script = tmp_path / "worker.py"
    script.write_text(CRASHING_WORKER)
    proc = subprocess.Popen(
        [sys.executable, str(script), REDIS_URL, namespace, run_id], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)  # type: ignore[union-attr]
        assert line == "started\n"
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()  # type: ignore[union-attr]

    runs = []

    @tool(side_effecting=True, timeout_s=1.0)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        return f"charged {cents} on {card}"

    store = RedisStore(REDIS_URL, namespace=namespace)
    try:
        inv = Invoker(ToolRegistry([charge]), middleware=shared_chain(store, lease_s=0.5))
        started = time.monotonic()
        env = await asyncio.wait_for(
            inv.invoke({"id": "w2", "name": "charge", "input": {"card": "4242", "cents": 900}}, ToolContext(run_id=run_id)),
            45,
        )
        waited = time.monotonic() - started
    finally:
        keys = await store.client.keys(f"{namespace}:*")
        if keys:
            await store.client.delete(*keys)
        await store.aclose()
    assert body_of(env) == {"ok": True, "value": "charged 900 on 4242"}
    assert runs == ["4242"]
    assert waited < 40, waited


def test_idempotency_lease_must_be_positive():
    with pytest.raises(ValueError, match="lease_s"):
        mw.idempotency(lease_s=0)


# ------------------------------------------------------------------ the repeat guard


def calendar() -> tuple[ToolRegistry, list[str]]:
    runs: list[str] = []

    @tool(read_only=True)
    def list_events(day: str) -> list:
        """List the calendar events of one day.

        Args:
            day: The day, YYYY-MM-DD.
        """
        runs.append("list")
        return [f"{len(runs)}"]

    @tool(side_effecting=True)
    def create_event(day: str, title: str) -> str:
        """Add an event to the calendar on a day; other events are left as they are.

        Args:
            day: The day, YYYY-MM-DD.
            title: The event's title.
        """
        runs.append("create")
        return f"created {title}"

    @tool(side_effecting=True)
    def reschedule_event(title: str, day: str) -> str:
        """Move an existing event to another day (the old slot is freed).

        Args:
            title: The event's title.
            day: The new day, YYYY-MM-DD.
        """
        runs.append("reschedule")
        return f"moved {title} to {day}"

    @tool(side_effecting=True)
    def cancel_event(title: str) -> str:
        """Cancel an event by its title; fails when there is no such event."""
        runs.append("cancel")
        raise ToolError(f"no event titled {title!r}; list the day's events first", code="not_found")

    return ToolRegistry([list_events, create_event, reschedule_event, cancel_event]), runs


async def test_calendar_sequence_all_runs():
    reg, runs = calendar()
    inv = Invoker(reg)
    day = "2026-12-01"
    envs = [
        await inv.invoke(c("list_events", 1, day=day)),
        await inv.invoke(c("create_event", 2, day=day, title="standup")),
        await inv.invoke(c("list_events", 3, day=day)),
        await inv.invoke(c("reschedule_event", 4, title="standup", day="2026-12-02")),
        await inv.invoke(c("list_events", 5, day=day)),
    ]
    assert [body_of(e) for e in envs] == [
        {"ok": True, "value": ["1"]},
        {"ok": True, "value": "created standup"},
        {"ok": True, "value": ["3"]},
        {"ok": True, "value": "moved standup to 2026-12-02"},
        {"ok": True, "value": ["5"]},
    ]
    assert runs == ["list", "create", "list", "reschedule", "list"]


async def test_reads_alone_are_still_stopped_at_the_third():
    reg, runs = calendar()
    inv = Invoker(reg)
    envs = [await inv.invoke(c("list_events", i, day="2026-12-01")) for i in range(4)]
    assert [e["ok"] for e in envs] == [True, True, False, False]
    assert envs[2] == repeated("list_events")
    assert envs[3]["error"]["code"] == "repeated_call" and envs[3]["error"]["count"] == 4
    assert runs == ["list", "list"]


async def test_the_same_invalid_call_is_stopped_at_the_third():
    reg, runs = calendar()
    inv = Invoker(reg)
    envs = [await inv.invoke(c("list_events", i, day=20261201)) for i in range(3)]
    assert [e["error"]["code"] for e in envs] == ["invalid_arguments", "invalid_arguments", "repeated_call"]
    assert envs[2] == repeated("list_events")
    assert runs == []


async def test_the_same_invalid_call_as_json_text_counts_as_the_same_call():
    reg, runs = calendar()
    inv = Invoker(reg)
    sent = ['{"day": 20261201}', '{ "day" : 20261201 }', '{"day":20261201}']
    envs = [
        await inv.invoke({"id": f"o{i}", "function": {"name": "list_events", "arguments": text}}) for i, text in enumerate(sent)
    ]
    assert [e["error"]["code"] for e in envs] == ["invalid_arguments", "invalid_arguments", "repeated_call"]
    assert envs[2] == repeated("list_events")


async def test_the_same_failing_call_is_stopped_at_the_third():
    reg, runs = calendar()
    inv = Invoker(reg)
    envs = [await inv.invoke(c("cancel_event", i, title="standup")) for i in range(3)]
    failure = {
        "ok": False,
        "error": {"code": "not_found", "message": "no event titled 'standup'; list the day's events first", "retriable": False},
    }
    assert envs == [failure, failure, repeated("cancel_event")]
    assert runs == ["cancel", "cancel"]


async def test_a_failed_side_effecting_call_does_not_reset_the_counts():
    reg, runs = calendar()
    inv = Invoker(reg)
    day = "2026-12-01"
    envs = [
        await inv.invoke(c("list_events", 1, day=day)),
        await inv.invoke(c("list_events", 2, day=day)),
        await inv.invoke(c("cancel_event", 3, title="x")),
        await inv.invoke(c("list_events", 4, day=day)),
    ]
    assert [e["ok"] for e in envs] == [True, True, False, False]
    assert envs[3] == repeated("list_events")


async def test_the_same_unknown_tool_is_stopped_at_the_third():
    reg, runs = calendar()
    inv = Invoker(reg)
    envs = [await inv.invoke(c("list_evnts", i, day="2026-12-01")) for i in range(3)]
    assert [e["error"]["code"] for e in envs] == ["unknown_tool", "unknown_tool", "repeated_call"]
    assert envs[2]["error"]["tool"] == "list_evnts" and envs[2]["error"]["count"] == 3


# ------------------------------------------------------------------ approval on every path


def approvals() -> tuple[ToolRegistry, list[str]]:
    runs: list[str] = []

    @tool(side_effecting=True, requires_approval=True)
    def wipe(sku: str) -> str:
        """Erase the stock records of a SKU (needs a human's approval).

        Args:
            sku: The SKU code.
        """
        runs.append(sku)
        return f"{sku} wiped"

    return ToolRegistry([wipe]), runs


def approval_required(args_json: str) -> dict[str, Any]:
    return {
        "ok": False,
        "error": {
            "code": "approval_required",
            "message": (
                "wipe needs the user's approval before it runs, and it was not run. Ask the user whether "
                f"to allow wipe with arguments {args_json}; call it again only after they approve."
            ),
            "tool": "wipe",
        },
    }


def test_dispatch_refuses_an_unapproved_call():
    reg, runs = approvals()
    env = dispatch({"id": "x", "name": "wipe", "input": {"sku": "S-1"}}, reg)
    assert env == approval_required('{"sku":"S-1"}')
    assert runs == []


async def test_dispatch_and_invoker_refuse_with_the_same_envelope():
    reg, runs = approvals()
    call = {"id": "x", "name": "wipe", "input": {"sku": "S-1"}}
    assert dispatch(call, reg) == await Invoker(reg).invoke(call)
    assert runs == []


def test_dispatch_honours_the_calls_approved_key():
    reg, runs = approvals()
    env = dispatch({"id": "x", "name": "wipe", "input": {"sku": "S-1"}, "approved": True}, reg)
    assert body_of(env) == {"ok": True, "value": "S-1 wiped"}
    # only the boolean True approves
    for token in ("true", 1, "yes", {"ok": True}):
        env = dispatch({"id": "y", "name": "wipe", "input": {"sku": "S-2"}, "approved": token}, reg)
        assert env == approval_required('{"sku":"S-2"}'), token
    assert runs == ["S-1"]


def test_dispatch_approved_key_on_openai_shapes():
    reg, runs = approvals()
    env = dispatch({"id": "x", "function": {"name": "wipe", "arguments": '{"sku": "S-1"}'}, "approved": True}, reg)
    assert body_of(env) == {"ok": True, "value": "S-1 wiped"}
    env = dispatch({"call_id": "y", "name": "wipe", "arguments": '{"sku": "S-2"}', "approved": True}, reg)
    assert body_of(env) == {"ok": True, "value": "S-2 wiped"}
    assert runs == ["S-1", "S-2"]


def test_dispatch_approver():
    reg, runs = approvals()
    seen = []
    ctx = ToolContext(run_id="r")

    def approver(t, args, got_ctx):
        seen.append((t.name, dict(args), got_ctx))
        return args["sku"] == "S-1"

    ok = dispatch({"id": "x", "name": "wipe", "input": {"sku": "S-1"}}, reg, ctx=ctx, approver=approver)
    refused = dispatch({"id": "y", "name": "wipe", "input": {"sku": "S-2"}}, reg, ctx=ctx, approver=approver)
    assert body_of(ok) == {"ok": True, "value": "S-1 wiped"}
    assert refused == approval_required('{"sku":"S-2"}')
    assert seen == [("wipe", {"sku": "S-1"}, ctx), ("wipe", {"sku": "S-2"}, ctx)]
    assert runs == ["S-1"]


def test_dispatch_approver_async_truthy_and_raising():
    reg, runs = approvals()

    async def yes(t, args, ctx):
        await asyncio.sleep(0)
        return True

    def truthy(t, args, ctx):
        return "yes"

    def broken(t, args, ctx):
        raise RuntimeError("approval service down")

    call = {"id": "x", "name": "wipe", "input": {"sku": "S-1"}}
    assert body_of(dispatch(call, reg, approver=yes)) == {"ok": True, "value": "S-1 wiped"}
    assert dispatch(call, reg, approver=truthy) == approval_required('{"sku":"S-1"}')
    assert dispatch(call, reg, approver=broken) == approval_required('{"sku":"S-1"}')
    assert runs == ["S-1"]


def test_dispatch_approver_is_not_asked_for_tools_without_approval():
    @tool(read_only=True)
    def peek(sku: str) -> str:
        """Look at a SKU's record without changing anything."""
        return sku

    asked = []
    env = dispatch({"id": "x", "name": "peek", "input": {"sku": "S"}}, ToolRegistry([peek]), approver=lambda *a: asked.append(a))
    assert body_of(env) == {"ok": True, "value": "S"}
    assert asked == []


def test_approved_inside_the_models_arguments_does_not_approve():
    runs = []

    @tool(side_effecting=True, requires_approval=True)
    def send(to: str, approved: bool = False) -> str:
        """Send a message to a recipient (needs a human's approval)."""
        runs.append(to)
        return "sent"

    reg = ToolRegistry([send])
    env = dispatch({"id": "x", "name": "send", "input": {"to": "bob", "approved": True}}, reg)
    assert env["ok"] is False and env["error"]["code"] == "approval_required"
    assert runs == []


# ------------------------------------------------------------------ undeclared effects


def plain_lookup(sku: str) -> str:
    """Look up a SKU in the catalogue and return its description."""
    return sku


def test_undeclared_effects_are_marked():
    reg = ToolRegistry.from_tools([plain_lookup])
    t = reg.get("plain_lookup")
    assert t.effects_declared is False
    assert t.side_effecting is False  # the reference's default is kept
    [entry] = reg.to_mcp()
    annotations = entry.get("annotations", {})
    assert "readOnlyHint" not in annotations and "destructiveHint" not in annotations, annotations


def test_declared_effects_are_marked():
    assert FunctionTool.from_callable(plain_lookup, side_effecting=False).effects_declared is True
    assert FunctionTool.from_callable(plain_lookup, side_effecting=True).effects_declared is True
    assert FunctionTool.from_callable(plain_lookup, side_effecting=None).effects_declared is True

    @tool(read_only=True)
    def peek(sku: str) -> str:
        """Look at a SKU's record without changing anything."""
        return sku

    assert peek.effects_declared is True
    [entry] = ToolRegistry([peek]).to_mcp()
    assert entry["annotations"] == {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}


def test_side_effecting_tool_that_only_adds():
    @tool(side_effecting=True, destructive=False)
    def create_event(day: str, title: str) -> str:
        """Add an event to the calendar on a day; other events are left as they are."""
        return f"created {title}"

    @tool(side_effecting=True)
    def reschedule_event(title: str, day: str) -> str:
        """Move an existing event to another day (the old slot is freed)."""
        return f"moved {title} to {day}"

    reg = ToolRegistry([create_event, reschedule_event])
    assert create_event.destructive is False
    annotations = {e["name"]: e["annotations"] for e in reg.to_mcp()}
    assert annotations["create_event"] == {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}
    assert annotations["reschedule_event"] == {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}


async def test_undeclared_tool_is_not_retried():
    runs = []

    def fetch_rates(currency: str) -> str:
        """Fetch the exchange rate of a currency from the rates service."""
        runs.append(currency)
        if len(runs) == 1:
            raise ConnectionError("rates service unreachable")
        return "1.1"

    async def no_sleep(delay: float) -> None:
        return None

    chain = [mw.audit(), mw.approval(), mw.repeat_guard(), mw.idempotency(), mw.retry(sleep=no_sleep), mw.timeout()]
    inv = Invoker(ToolRegistry.from_tools([fetch_rates]), middleware=chain)
    env = await inv.invoke(c("fetch_rates", 1, currency="EUR"))
    assert env["ok"] is False, env
    assert runs == ["EUR"]  # one attempt: nobody said a second call is harmless

    # the same body declared read-only is retried
    runs.clear()
    declared = FunctionTool.from_callable(fetch_rates, side_effecting=False)
    inv = Invoker(ToolRegistry([declared]), middleware=chain)
    env = await inv.invoke(c("fetch_rates", 2, currency="EUR"))
    assert body_of(env) == {"ok": True, "value": "1.1"}
    assert runs == ["EUR", "EUR"]


def test_lint_reports_undeclared_effects():
    from agentkit_tools import lint

    findings = lint(ToolRegistry.from_tools([plain_lookup]))
    undeclared = [f for f in findings if f.code == "undeclared_effects"]
    assert [(f.tool, f.code) for f in undeclared] == [("plain_lookup", "undeclared_effects")], findings
    assert "side_effecting" in undeclared[0].message
    assert [f for f in lint(ToolRegistry([FunctionTool.from_callable(plain_lookup, side_effecting=False)])) if f.code == "undeclared_effects"] == []

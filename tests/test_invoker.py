"""``Invoker``: call shapes, envelopes, concurrency, frozen arguments, where bodies run, and
``ToolContext`` (SPEC §7, §11)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from typing import Any

import pytest

from agentkit_tools import (
    FrozenDict,
    FrozenList,
    FunctionTool,
    Invoker,
    ToolContext,
    ToolRegistry,
    ToolSchema,
    _core,
    middleware as mw,
    tool,
)
from agentkit_tools.middleware import Middleware, ToolCall
from envelopes import call


def without_elapsed(env: dict[str, Any]) -> dict[str, Any]:
    out = dict(env)
    elapsed = out.pop("elapsed_ms")
    assert isinstance(elapsed, float) and elapsed >= 0.0
    return out


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers and return their sum to the caller."""
    return a + b


@tool(read_only=True)
def broken(x: int) -> int:
    """A tool whose body always fails with a KeyError."""
    raise KeyError("missing")


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([add, broken])


# ------------------------------------------------------------------ call shapes and envelopes


async def test_anthropic_shape(registry):
    env = await Invoker(registry).invoke({"id": "c1", "name": "add", "input": {"a": 2, "b": 3}})
    assert without_elapsed(env) == {"ok": True, "value": 5}


async def test_anthropic_shape_with_json_text(registry):
    env = await Invoker(registry).invoke({"id": "c1", "name": "add", "input": '{"a": 2, "b": 40}'})
    assert without_elapsed(env) == {"ok": True, "value": 42}


async def test_openai_chat_shape(registry):
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}}
    assert without_elapsed(await Invoker(registry).invoke(call)) == {"ok": True, "value": 2}


async def test_openai_responses_shape(registry):
    call = {"type": "function_call", "call_id": "fc_1", "name": "add", "arguments": '{"a": 7, "b": 1}'}
    records: list[dict] = []
    env = await Invoker(registry, middleware=[mw.audit(records.append)]).invoke(call)
    assert without_elapsed(env) == {"ok": True, "value": 8}
    assert records[0]["call_id"] == "fc_1"


async def test_unknown_tool_envelope(registry):
    env = await Invoker(registry).invoke({"id": "c", "name": "ad", "input": {}})
    assert env == {
        "ok": False,
        "error": {
            "code": "unknown_tool",
            "message": "No tool named 'ad'. Did you mean 'add'? Available tools: add, broken. Call one of those instead.",
            "available": ["add", "broken"],
            "did_you_mean": "add",
        },
    }


async def test_invalid_arguments_envelope(registry):
    env = await Invoker(registry).invoke({"id": "c", "name": "add", "input": {"a": "1"}})
    assert env["ok"] is False
    assert env["error"]["code"] == "invalid_arguments"
    assert env["error"]["errors"] == [
        {"path": "b", "reason": "missing required argument"},
        {"path": "a", "reason": env["error"]["errors"][1]["reason"]},
    ]
    assert env["error"]["schema"] == add.schema.parameters


async def test_not_a_dict_is_an_invalid_call(registry):
    env = await Invoker(registry).invoke(["add"])  # type: ignore[arg-type]
    assert env == {
        "ok": False,
        "error": {
            "code": "invalid_call",
            "message": "a tool call must be a dict like {'id': ..., 'name': ..., 'input': {...}}, got list. "
            "Send a tool call with a name and its arguments.",
        },
    }


async def test_a_failing_body_is_an_internal_error_envelope(registry):
    env = await Invoker(registry).invoke({"id": "c", "name": "broken", "input": {"x": 1}})
    assert env == {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": "broken failed: KeyError: 'missing'. This is a bug in the tool, not in your arguments; do not retry.",
        },
    }


async def test_a_failing_middleware_never_raises(registry):
    class Boom(Middleware):
        name = "boom"

        def wrap(self, invoker, nxt):
            async def handle(call):
                raise RuntimeError("middleware bug")

            return handle

    env = await Invoker(registry, middleware=[Boom()]).invoke({"id": "c", "name": "add", "input": {"a": 1, "b": 1}})
    assert env == {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": "The call could not be completed: RuntimeError: middleware bug. This is a fault in the "
            "agent's tooling, not in your arguments; do not retry.",
        },
    }


async def test_output_mismatch_envelope():
    @tool(read_only=True, output_schema={"type": "object", "title": "Point", "required": ["x"]})
    def point() -> Any:
        """Return a point that is missing its x coordinate."""
        return {"y": 1}

    env = await Invoker(ToolRegistry([point])).invoke({"id": "c", "name": "point", "input": {}})
    assert env["ok"] is False
    assert env["error"]["code"] == "output_mismatch"


async def test_default_chain_and_repr(registry):
    inv = Invoker(registry)
    assert [m.name for m in inv.middleware] == ["audit", "approval", "repeat_guard", "idempotency", "retry", "timeout"]
    assert repr(inv) == (
        "Invoker(2 tools, middleware=[audit(), approval(), repeat_guard(limit=3), idempotency(), "
        "retry(max_attempts=3), timeout(default_s=10.0)])"
    )
    assert mw.__all__ == [
        "Middleware", "ToolCall", "Handler", "approval", "audit", "default_chain", "egress", "idempotency",
        "repeat_guard", "retry", "timeout",
    ]


async def test_a_list_of_tools_is_a_registry():
    env = await Invoker([add]).invoke({"id": "c", "name": "add", "input": {"a": 1, "b": 2}})
    assert without_elapsed(env) == {"ok": True, "value": 3}


# ------------------------------------------------------------------ invoke_many


async def test_invoke_many_runs_async_calls_concurrently_in_order():
    started = 0
    all_started = asyncio.Event()

    @tool(read_only=True, timeout_s=5)
    async def wait_for_all(i: int) -> int:
        """Wait until all ten calls of the turn have started, then return i."""
        nonlocal started
        started += 1
        if started == 10:
            all_started.set()
        await all_started.wait()  # only returns if the ten calls overlap
        return i

    calls = [{"id": f"c{i}", "name": "wait_for_all", "input": {"i": i}} for i in range(10)]
    envs = await Invoker(ToolRegistry([wait_for_all])).invoke_many(reversed(calls))
    assert [e["value"] for e in envs] == list(range(9, -1, -1))


async def test_invoke_many_runs_sync_calls_in_parallel_threads():
    barrier = threading.Barrier(10, timeout=5)
    threads: set[int] = set()
    loop_thread = threading.get_ident()

    @tool(read_only=True)
    def meet(i: int) -> int:
        """Block until ten calls meet at a barrier, then return i."""
        threads.add(threading.get_ident())
        barrier.wait()  # raises BrokenBarrierError unless ten threads run at once
        return i

    calls = [{"id": f"c{i}", "name": "meet", "input": {"i": i}} for i in range(10)]
    envs = await Invoker(ToolRegistry([meet]), middleware=[]).invoke_many(calls)
    assert [e.get("value") for e in envs] == list(range(10))
    assert len(threads) == 10 and loop_thread not in threads


async def test_invoke_many_mixes_failures_and_successes(registry):
    envs = await Invoker(registry).invoke_many(
        [
            {"id": "1", "name": "add", "input": {"a": 1, "b": 1}},
            {"id": "2", "name": "nope", "input": {}},
            {"id": "3", "name": "broken", "input": {"x": 0}},
        ]
    )
    assert [e["ok"] for e in envs] == [True, False, False]
    assert [e.get("error", {}).get("code") for e in envs] == [None, "unknown_tool", "internal_error"]
    assert await Invoker(registry).invoke_many([]) == []


# ------------------------------------------------------------------ arguments and context


async def test_arguments_reach_tools_deep_frozen():
    seen: dict[str, Any] = {}

    @tool(read_only=True)
    def inspect_args(items: list[dict[str, int]], meta: dict[str, list[int]]) -> str:
        """Record the argument types and try to mutate them."""
        seen["types"] = (type(items), type(items[0]), type(meta), type(meta["k"]))
        try:
            items.append({})
        except TypeError as exc:
            seen["error"] = str(exc)
        return "done"

    env = await Invoker(ToolRegistry([inspect_args])).invoke(
        {"id": "c", "name": "inspect_args", "input": {"items": [{"a": 1}], "meta": {"k": [1]}}}
    )
    assert without_elapsed(env) == {"ok": True, "value": "done"}
    assert seen["types"] == (FrozenList, FrozenDict, FrozenDict, FrozenList)
    assert "frozen value" in seen["error"]


@pytest.mark.parametrize("size", [3, 63, 64, 65, 200])
@pytest.mark.parametrize("holes", [False, True])
async def test_every_container_argument_is_frozen_wherever_it_sits_in_the_mapping(size: int, holes: bool) -> None:
    """The containers of a call's mapping are found where reading it for validation found them
    (by their position in the dict's order): lists and dicts at the first, middle and last
    places, in dicts of up to 64 entries and beyond, and in a dict with deleted entries
    (its positions are no longer its indices), all reach the body frozen; other values as they
    were sent."""
    seen: list[dict[str, type]] = []

    @tool(read_only=True, non_blocking=True)
    def record(**kwargs: Any) -> int:
        """Record the type of every argument it was given."""
        seen.append({k: type(v) for k, v in kwargs.items()})
        return len(kwargs)

    args: dict[str, Any] = {}
    if holes:
        args.update({f"gone{i}": i for i in range(5)})
    for i in range(size):
        args[f"a{i}"] = [i] if i % 3 == 0 else {"k": i} if i % 3 == 1 else i
    args[f"a{size - 1}"] = [[1], {"k": [2]}]
    if holes:
        for i in range(5):
            del args[f"gone{i}"]
    env = await Invoker(ToolRegistry([record])).invoke({"id": "c", "name": "record", "input": args})
    assert without_elapsed(env) == {"ok": True, "value": size}
    expected = {f"a{i}": FrozenList if i % 3 == 0 else FrozenDict if i % 3 == 1 else int for i in range(size)}
    expected[f"a{size - 1}"] = FrozenList
    assert seen == [expected]


@pytest.mark.parametrize("non_blocking", [True, False])
@pytest.mark.parametrize("is_async", [False, True])
async def test_a_replaced_fn_gets_the_arguments_frozen(non_blocking, is_async):
    """``fn`` set on a tool made by ``@tool`` (any callable of ``(args, ctx)``) gets a
    ``FrozenDict`` of deep-frozen arguments, whichever way the body runs, as a hand-built tool's."""
    seen: list[Any] = []

    @tool(read_only=True, non_blocking=non_blocking)
    def echo(items: list[int], n: int = 0) -> str:
        """Echo the items back; the body below replaces this one."""
        return "original"

    def sync_fn(args, ctx):
        seen.append((type(args), type(args["items"]), dict(args)))
        return "replaced"

    async def async_fn(args, ctx):
        return sync_fn(args, ctx)

    echo.fn = async_fn if is_async else sync_fn  # type: ignore[misc]
    echo._is_async = is_async  # type: ignore[attr-defined]
    env = await Invoker(ToolRegistry([echo])).invoke({"id": "c", "name": "echo", "input": {"items": [1, 2]}})
    assert without_elapsed(env) == {"ok": True, "value": "replaced"}
    assert seen == [(FrozenDict, FrozenList, {"items": [1, 2]})]


async def test_hand_built_tool_gets_a_frozen_dict_and_the_context():
    seen: list[Any] = []

    async def fn(args, ctx):
        seen.append((type(args), dict(args), ctx))
        try:
            args["x"] = 2
        except TypeError:
            seen.append("refused")
        return args["x"]

    t = FunctionTool(
        "raw", fn, "A hand-built tool that echoes x.", False,
        schema=ToolSchema("raw", "echo", {"type": "object", "properties": {"x": {"type": "integer"}}}),
    )
    ctx = ToolContext(run_id="r1")
    env = await Invoker(ToolRegistry([t])).invoke({"id": "c", "name": "raw", "input": {"x": 1}}, ctx)
    assert without_elapsed(env) == {"ok": True, "value": 1}
    assert seen == [(FrozenDict, {"x": 1}, ctx), "refused"]


async def test_context_is_injected():
    @tool(read_only=True)
    def whoami(ctx) -> str:
        """Return the run id of the context this call runs in."""
        return ctx.run_id

    env = await Invoker(ToolRegistry([whoami])).invoke({"id": "c", "name": "whoami", "input": {}}, ToolContext(run_id="run-7"))
    assert without_elapsed(env) == {"ok": True, "value": "run-7"}


async def test_any_tool_object_with_async_run_works():
    class Echo:
        name = "echo"
        description = "Echo the text argument back to the caller."
        side_effecting = False
        requires_approval = False
        output_schema = None
        schema = ToolSchema("echo", description, {"type": "object", "properties": {"text": {"type": "string"}}})

        async def run(self, args, ctx):
            return f"{type(args).__name__}:{args['text']}"

    env = await Invoker(ToolRegistry([Echo()])).invoke({"id": "c", "name": "echo", "input": {"text": "hi"}})
    assert without_elapsed(env) == {"ok": True, "value": "FrozenDict:hi"}


# ------------------------------------------------------------------ where bodies run

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("REQUEST_ID", default="unset")


async def test_sync_body_runs_off_the_loop_with_the_callers_contextvars():
    loop_thread = threading.get_ident()

    @tool(read_only=True)
    def where() -> list:
        """Report the thread and the request id this body sees."""
        return [threading.get_ident() != loop_thread, REQUEST_ID.get()]

    REQUEST_ID.set("req-42")
    env = await Invoker(ToolRegistry([where])).invoke({"id": "c", "name": "where", "input": {}})
    assert without_elapsed(env) == {"ok": True, "value": [True, "req-42"]}


async def test_inline_tools_run_on_the_event_loop_thread():
    loop_thread = threading.get_ident()

    @tool(read_only=True)
    def pure() -> bool:
        """A non-blocking computation that reports whether it ran on the loop thread."""
        return threading.get_ident() == loop_thread

    inv_inline = Invoker(ToolRegistry([pure]), inline={"pure"})
    inv_pool = Invoker(ToolRegistry([pure]))
    call = {"id": "c", "name": "pure", "input": {}}
    assert (await inv_inline.invoke(call))["value"] is True
    assert (await inv_pool.invoke(call))["value"] is False
    pure.non_blocking = True  # the per-tool opt-in
    try:
        assert (await inv_pool.invoke(call))["value"] is True
    finally:
        del pure.non_blocking


async def test_sync_body_returning_an_awaitable_is_awaited():
    async def later() -> str:
        return "awaited"

    @tool(read_only=True)
    def deferred() -> Any:
        """Return a coroutine that the dispatcher must await."""
        return later()

    env = await Invoker(ToolRegistry([deferred])).invoke({"id": "c", "name": "deferred", "input": {}})
    assert without_elapsed(env) == {"ok": True, "value": "awaited"}


async def test_sync_exceptions_cross_the_thread_hop_as_envelopes(registry):
    env = await Invoker(registry, middleware=[]).invoke({"id": "c", "name": "broken", "input": {"x": 1}})
    assert env["error"]["code"] == "internal_error"
    from agentkit_tools._runner import pool_sizes

    threads, idle, stuck = pool_sizes()  # (other tests may have left bodies running past their deadline)
    assert threads >= 1 and idle <= threads and stuck <= threads


# ------------------------------------------------------------------ ToolContext


def test_tool_context_child_and_approvals():
    parent = ToolContext(run_id="run", trace=print, approvals={"send"}, deadline=123.0)
    child = parent.child()
    assert child.run_id.startswith("run/") and len(child.run_id) == len("run/") + 12
    assert (child.trace, child.approvals, child.deadline, child.parent) == (print, {"send"}, 123.0, parent)
    child.approve("delete")
    assert (parent.approvals, child.approvals) == ({"send"}, {"send", "delete"})
    assert parent.child(run_id="sub").run_id == "sub"
    assert len(ToolContext().run_id) == 32
    assert ToolContext().remaining_s() is None


def test_tool_context_with_timeout():
    ctx = ToolContext.with_timeout(30.0, run_id="r")
    remaining = ctx.remaining_s()
    assert ctx.run_id == "r" and remaining is not None and 29.0 < remaining <= 30.0


async def test_run_id_scopes_state_and_other_context_objects_work():
    class RunContext:  # agentkit's own context shape: only the attributes the Invoker reads
        def __init__(self, run_id):
            self.run_id = run_id

    calls = 0

    @tool(side_effecting=True)
    def send(to: str) -> str:
        """Send a message to a recipient and return a receipt."""
        nonlocal calls
        calls += 1
        return f"sent-{calls}"

    inv = Invoker(ToolRegistry([send]))
    call = {"id": "c", "name": "send", "input": {"to": "bob"}}
    a1 = await inv.invoke(call, RunContext("a"))
    a2 = await inv.invoke(call, RunContext("a"))
    b1 = await inv.invoke(call, RunContext("b"))
    n1 = await inv.invoke(call)
    n2 = await inv.invoke(call, object())  # no run_id: the Invoker's default scope
    assert [e["value"] for e in (a1, a2, b1, n1, n2)] == ["sent-1", "sent-1", "sent-2", "sent-3", "sent-3"]
    assert [e.get("deduplicated", False) for e in (a1, a2, b1, n1, n2)] == [False, True, False, False, True]
    # repeat counts: each success reset its conversation's counts, the deduplicated repeats count
    assert inv.state.sizes() == (2, 3, 0)
    inv.forget("a")
    assert inv.state.sizes() == (1, 2, 0)


def test_tool_call_hash_is_computed_lazily():
    tc = ToolCall({}, "id", "t", None, None, '{"b": 1, "a": [2]}', None, None, "s", None)
    assert (tc.canonical, tc.args_hash) == ('{"a":[2],"b":1}', _core.canonical_args('{"a":[2],"b":1}')[1])


EXIT_SCRIPT = """
import asyncio, sys, time
from agentkit_tools import Invoker, ToolRegistry, tool, middleware as mw

@tool(read_only=True)
def slow(x: int) -> int:
    '''Sleep a little in a worker thread, then say so.'''
    time.sleep(float(sys.argv[1]))
    print("body done", flush=True)
    return x

async def main():
    env = await Invoker(ToolRegistry([slow]), middleware=[mw.timeout(default_s=float(sys.argv[2]))]).invoke(
        {"id": "c", "name": "slow", "input": {"x": 1}})
    print(env.get("value", env.get("error", {}).get("code")), flush=True)

asyncio.run(main())
print("main done", flush=True)
"""


@pytest.mark.parametrize(
    "sleep_s,timeout_s,expected",
    [("0", "30", "body done\n1\nmain done\n"), ("30", "0.05", "timeout\nmain done\n"), ("0.2", "0.05", None)],
)
def test_interpreter_exit_never_waits_for_a_timed_out_worker_thread(tmp_path, sleep_s, timeout_s, expected):
    import subprocess
    import sys
    import time

    script = tmp_path / "exit_race.py"
    script.write_text(EXIT_SCRIPT)
    for _ in range(5):  # a worker thread waking while the interpreter finalizes must not crash it
        started = time.monotonic()
        proc = subprocess.run([sys.executable, str(script), sleep_s, timeout_s], capture_output=True, text=True, timeout=60)
        if expected is None:  # the body may or may not finish before the process is gone
            assert proc.stdout in ("timeout\nmain done\n", "timeout\nmain done\nbody done\n")
            assert (proc.returncode, proc.stderr) == (0, "")
        else:
            assert (proc.returncode, proc.stdout, proc.stderr) == (0, expected, "")
        assert time.monotonic() - started < 20  # not the body's 30 s


def test_non_blocking_tools_run_on_the_event_loop() -> None:
    import threading

    from agentkit_tools import Invoker, ToolRegistry, tool

    @tool(read_only=True, non_blocking=True)
    def where() -> str:
        """Report the name of the thread the tool body runs in."""
        return threading.current_thread().name

    @tool(read_only=True)
    def where_blocking() -> str:
        """Report the name of the thread the tool body runs in."""
        return threading.current_thread().name

    async def main() -> tuple[str, str, str]:
        inv = Invoker(ToolRegistry.from_tools([where, where_blocking]))
        a = await inv.invoke({"id": "1", "name": "where", "input": {}})
        b = await inv.invoke({"id": "2", "name": "where_blocking", "input": {}})
        return a["value"], b["value"], threading.current_thread().name

    on_loop, off_loop, loop_thread = asyncio.run(main())
    assert where.non_blocking is True and where_blocking.non_blocking is False
    assert on_loop == loop_thread
    assert off_loop != loop_thread


async def test_crossings_into_the_core_per_default_chain_call() -> None:
    """Two counts of the entries into the Rust core during one default-chain call.

    Calls from Python code into the core, counted with a profile hook (``c_call`` events):
    exactly one, ``_core.drive`` (lookup, validation, freezing, canonical text and every decision
    before the body). It answers with the envelope when the pipeline answers at once: a
    non-blocking sync tool, and an async tool whose body does not suspend (the core calls the body
    itself, it takes an async body's first step). Else it answers with the core's driver of the
    call (``_core.Drive``), which performs every step the pipeline asks for and feeds each outcome
    in inside the core (no ``Call.ok`` from Python). The deadline's timer is the core's, entered
    and left from within these entries. A sync body's hand-off to a worker thread is the driver's
    too (an idle worker promised the call or a thread started, the job queued, a brief wait for
    the result when the loop has nothing else to run): no entry of its own; when its result is not
    there by the end of that wait (the pool counts which: ``WorkerPool.starts()``), the driver
    awaits it under the deadline itself (the core's ``JobAwait``, stepped inside the core: no
    entry either). (The worker thread is not profiled.)

    Entries the hook cannot see: the driver is awaited, which the interpreter enters from C (the
    ``await`` takes its ``__await__``; each time the event loop resumes the caller's task, the
    task's coroutine steps it with ``__next__``), so these are counted by the core itself
    (``_core.protocol_entries()``): for a sync body on a worker whose result is there at once, one
    ``__await__`` and one ``__next__``; for a body with one suspension one ``__await__`` and two
    ``__next__`` (one up to its suspension and the final one, the two steps of the caller's task
    that a plain coroutine awaited there costs too). The suspended body itself is stepped by the
    driver inside the core (no ``BodyAwait`` entry). None for the calls answered at once. In a turn of ``invoke_many`` each call's task steps the core's ``Relay`` (its
    coroutine) from C the same way: two ``Relay.__next__`` per call that suspends once, one per
    call that does not, as many steps as a task of a plain coroutine takes; and the caller awaits
    the turn itself (the core's ``Turn``): one ``__await__`` and two ``__next__`` (starting every
    call, then collecting the envelopes once the last one is answered), whatever the number of
    calls."""
    import sys
    from collections import Counter

    from agentkit_tools import _core, _runner

    def protocol_since(before: dict[str, int]) -> dict[str, int]:
        now = _core.protocol_entries()
        return {k: now[k] - before[k] for k in now if now[k] != before[k]}

    @tool(read_only=True)
    async def add_async(a: int, b: int) -> int:
        """Add two integers and return their sum to the caller."""
        return a + b

    @tool(read_only=True)
    def add_sync(a: int, b: int) -> int:
        """Add two integers and return their sum to the caller."""
        return a + b

    @tool(read_only=True)
    def add_slow(a: int, b: int) -> int:
        """Add two integers after 20 ms: its result is never there by the end of the brief wait."""
        time.sleep(0.02)
        return a + b

    @tool(read_only=True, non_blocking=True)
    def add_inline(a: int, b: int) -> int:
        """Add two integers and return their sum to the caller."""
        return a + b

    @tool(read_only=True)
    async def add_later(a: int, b: int) -> int:
        """Add two integers after a pass of the event loop."""
        await asyncio.sleep(0)
        return a + b

    inv = Invoker(ToolRegistry([add_async, add_sync, add_slow, add_inline, add_later]))
    for name in ("add_async", "add_sync", "add_slow", "add_inline", "add_later"):
        await inv.invoke({"id": "0", "name": name, "input": {"a": 0, "b": 0}})
        seen: Counter[str] = Counter()

        def profile(frame: Any, event: str, arg: Any) -> None:
            owner = getattr(arg, "__self__", None)
            if event == "c_call" and (
                getattr(arg, "__module__", None) == "agentkit_tools._core" or type(owner).__module__ == "agentkit_tools._core"
            ):
                seen[arg.__qualname__] += 1

        before, starts = _core.protocol_entries(), _runner._POOL.starts()
        sys.setprofile(profile)
        try:
            env = await inv.invoke({"id": "1", "name": name, "input": {"a": 3, "b": 4}})
        finally:
            sys.setprofile(None)
        resumed = protocol_since(before)
        assert env["value"] == 7
        handoff = {k: seen.pop(k) for k in list(seen) if k.split(".")[0] == "WorkerPool"}
        # a worker's result there by the end of the hand-off's wait: no suspension
        at_once = _runner._POOL.starts()[0] > starts[0]
        if name == "add_slow":
            assert not at_once
        steps = {"add_later": 2, "add_slow": 2, "add_sync": 1 if at_once else 2}.get(name, 0)
        assert resumed == ({"Drive.__await__": 1, "Drive.__next__": steps} if steps else {})
        assert handoff == {}
        # an audit record emitted (a span opened) is fed in by the driver too; a worker's result
        # not back by the end of the brief wait is awaited by the driver too, under the deadline
        assert dict(seen) == {"drive": 1}, (name, at_once)

    for name, steps in (("add_async", 1), ("add_later", 2)):
        before = _core.protocol_entries()
        envs = await inv.invoke_many([{"id": str(i), "name": name, "input": {"a": 3, "b": 4 + i}} for i in range(2)])
        assert [e["value"] for e in envs] == [7, 8]
        assert protocol_since(before) == {"Relay.__next__": 2 * steps, "Turn.__await__": 1, "Turn.__next__": 2}


@pytest.mark.parametrize("waits", ["audit sink", "approver", "idempotency store"])
@pytest.mark.parametrize("entry", ["invoke", "invoke_many"])
async def test_a_pending_call_collected_while_a_host_callback_awaits_logs_nothing(
    entry: str, waits: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A call dropped while an async host callback (audit sink, approver, idempotency store)
    awaits, and garbage-collected: its coroutine is closed, which is no failure of the callback
    (nothing logged, nothing printed as ignored)."""
    import gc
    import sys

    async def forever(*_: Any) -> Any:
        await asyncio.get_running_loop().create_future()

    class Store:
        get = set = compare_and_set = forever

    @tool(read_only=True)
    async def quick(x: int) -> int:
        """Answer right away with the number given."""
        return x

    @tool(side_effecting=True, requires_approval=True)
    async def gated(x: int) -> int:
        """Answer with the number given, once approved."""
        return x

    @tool(side_effecting=True)
    async def acts(x: int) -> int:
        """Act once on the number given and answer it."""
        return x

    name, chain = {
        "audit sink": ("quick", [mw.audit(forever), *mw.default_chain()[1:]]),
        "approver": ("gated", [mw.approval(forever)]),
        "idempotency store": ("acts", [mw.idempotency(Store())]),
    }[waits]
    inv = Invoker(ToolRegistry([quick, gated, acts]), middleware=chain)
    calls = [call(name, "1", x=1), call(name, "2", x=2)] if entry == "invoke_many" else [call(name, "1", x=1)]
    task = asyncio.ensure_future(inv.invoke_many(calls) if entry == "invoke_many" else inv.invoke(calls[0]))
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    await asyncio.sleep(0.05)
    assert not task.done()
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        caplog.clear()
        del task, inv
        gc.collect()
        await asyncio.sleep(0)
    finally:
        sys.unraisablehook = hook
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert [u.exc_value for u in unraisable] == []


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_generator_exit_an_audit_sink_raises_itself_is_its_own_failure(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """Not a close of the call's coroutine: logged, the call answered as it would be."""

    def sync_sink(rec: Any) -> None:
        raise GeneratorExit()

    async def async_sink(rec: Any) -> None:
        await asyncio.sleep(0)
        raise GeneratorExit()

    @tool(read_only=True)
    async def quick(x: int) -> int:
        """Answer right away with the number given."""
        return x

    inv = Invoker(ToolRegistry([quick]), middleware=[mw.audit(sync_sink if kind == "sync" else async_sink)])
    env = await inv.invoke(call("quick", "1", x=1))
    assert (env["ok"], env["value"]) == (True, 1)
    assert [r.getMessage().split(" at 0x")[0] for r in caplog.records] == [f"audit sink <function test_a_generator_exit_an_audit_sink_raises_itself_is_its_own_failure.<locals>.{kind}_sink"]

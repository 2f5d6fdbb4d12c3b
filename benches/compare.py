"""agentkit-tools side by side with the tool layers people use today (issue 6).

One run, one 6-parameter tool (``str``, a ``Literal`` of 4 strings, ``list[str]``, ``bool``,
``int = 10``, ``float | None = None``; a Google docstring with two summary paragraphs, Args and
Returns), the same arguments everywhere:

- M1 definition: µs to turn a fresh function object (freshly compiled code) into a tool;
- M2 a valid call with a mapping, M2b with the raw JSON text, through ``dispatch`` and
  ``Invoker.invoke`` (default middleware chain), for a sync tool run inline (``non_blocking``),
  a sync tool run off the loop, and an ``async`` tool;
- M3 a call with two problems (enum violation, wrong type), to the model-facing error;
- M5 1,000 concurrent calls of an async tool that sleeps 10 ms (``invoke_many``);
- M6 define and register 2,000 tools, then render all their schemas for OpenAI Chat;
- M7 one tool call through each agent framework with our tool (``agentkit_tools.frameworks``)
  against the same framework's native tool of the same async function: langchain-core
  ``ainvoke(ToolCall)``, the OpenAI Agents SDK's ``on_invoke_tool`` and a whole ``Runner.run``
  with a scripted model, a whole pydantic-ai ``Agent.run`` with a ``FunctionModel``;
- M8 one MCP ``tools/call`` round trip to an in-process ``MCPServer``: through our client
  (``MCPToolset`` + ``Invoker``) against the ``mcp`` SDK's ``ClientSession.call_tool`` alone;
- memory: peak RSS of M6 at 2,000 and 20,000 tools, and RSS growth over 1,000,000 calls
  (each in a fresh subprocess).

Baselines in the same process: a direct ``fn(**args)`` call; the validation floor (direct call
plus our core's validation alone); a pure-Python dispatcher on the ``jsonschema`` package
(``benches/jsonschema_baseline.py``); the tool layers of ``pydantic-ai-slim`` (``Tool`` /
``FunctionSchema``: pydantic-core validation, ``call`` running a sync body in an executor) and
``langchain-core`` (``StructuredTool.from_function(parse_docstring=True)``, ``invoke``/``ainvoke``).

Run (after the README's test set-up): ``pip install -r benches/requirements.txt`` then
``python benches/compare.py`` (``--quick`` for a smoke run, ``--only-integrations`` for M7/M8,
``--only M5 --rounds 30`` for M5 alone, its medians over 30 interleaved rounds). Use a release build of the core:
``cargo build --release --lib`` and copy ``target/release/libagentkit_tools_core.so`` to
``agentkit_tools/_core.abi3.so`` of the package on ``sys.path`` (``pip install .`` does this).
Prints a table (median over repeats, min–max, and the ratio baseline / ours) and the targets
met; writes ``benches/results/compare.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import asyncio
import concurrent.futures
import gc
import itertools
import json
import logging
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jsonschema_baseline as jsb  # noqa: E402

from agentkit_tools import Invoker, ToolRegistry, dispatch, tool  # noqa: E402
from agentkit_tools import _core  # noqa: E402

# ---------------------------------------------------------------------------- the tool

SOURCE = '''
{kw}def {name}(
    query: str,
    scope: Literal["all", "code", "issues", "docs"],
    tags: list[str],
    exact: bool,
    limit: int = 10,
    min_score: float | None = None,
) -> list[str]:
    """Search the project's documentation for pages that match a query.

    Pages are ranked by relevance and their titles returned best first; narrow the search
    with a scope and tags when the first results are too broad.

    Args:
        query: The words to look for, as the user would type them.
        scope: Which part of the project to search.
        tags: Only pages that carry all of these tags.
        exact: Match the query as one phrase instead of any of its words.
        limit: The most titles to return.
        min_score: Drop pages whose relevance score is below this (0 to 1).

    Returns:
        The titles of the matching pages, best first.
    """
    {body}
    return [query, scope, *tags][:limit]
'''

ARGS = {"query": "rate limits", "scope": "docs", "tags": ["api", "http"], "exact": False, "limit": 5}
ARGS_JSON = json.dumps(ARGS)
BAD_ARGS = {"query": "rate limits", "scope": "everything", "tags": ["api"], "exact": "maybe"}
EXPECTED = ["rate limits", "docs", "api", "http"]

_fresh = itertools.count()


def make_fn(name: str | None = None, *, is_async: bool = False, body: str = "pass") -> Callable[..., Any]:
    """A fresh function object with freshly compiled code (nothing shared with earlier ones)."""
    n = next(_fresh)
    name = name or f"search_docs_{n}"
    src = SOURCE.format(kw="async " if is_async else "", name=name, body=body)
    ns: dict[str, Any] = {"Literal": Literal, "asyncio": asyncio}
    exec(compile(src, f"<bench tool {n}>", "exec", dont_inherit=True), ns)  # noqa: S102 - our own source text
    return ns[name]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- timing

def _stats(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


Spec = tuple[str, Any, int]


def time_sync(fn: Callable[[], Any], n: int, repeat: int = 0) -> Spec:
    """A case: ``n`` calls of ``fn()`` per sample (run by ``interleave``)."""
    return ("sync", fn, n)


async def time_async(fn: Callable[[], Awaitable[Any]], n: int, repeat: int = 0) -> Spec:
    """A case: ``n`` awaited calls of ``fn()`` per sample."""
    return ("async", fn, n)


def time_each(make: Callable[[], Any], run: Callable[[Any], Any], n: int, repeat: int = 0) -> Spec:
    """A case: ``run(x)`` over ``n`` fresh inputs ``make()`` built before the clock starts."""
    return ("each", (make, run), n)


async def interleave(rows: list[tuple[str, Spec, bool]], repeat: int) -> list[tuple[str, list[float], bool]]:
    """µs per call of every case, one sample per round; the rounds of the cases are interleaved
    so that load from other processes on a shared machine affects them alike."""
    samples: list[list[float]] = [[] for _ in rows]
    for _ in range(repeat):
        for i, (_, (kind, fn, n), _) in enumerate(rows):
            inputs = [fn[0]() for _ in range(n)] if kind == "each" else None
            gc.collect()
            t0 = time.perf_counter()
            if kind == "each":
                run = fn[1]
                for x in inputs:  # type: ignore[union-attr]
                    run(x)
            elif kind == "sync":
                for _ in range(n):
                    fn()
            else:
                for _ in range(n):
                    await fn()
            samples[i].append((time.perf_counter() - t0) / n * 1e6)
    return [(label, samples[i], ours) for i, (label, _, ours) in enumerate(rows)]


_STARTED = time.perf_counter()


def progress(step: str) -> None:
    """One line on stderr per finished step, so a long run is never silent."""
    print(f"[{time.perf_counter() - _STARTED:5.0f} s] {step}", file=sys.stderr, flush=True)


class Results:
    def __init__(self) -> None:
        self.groups: list[tuple[str, str, list[tuple[str, dict[str, float], bool]]]] = []

    def add(self, group: str, ours: str, rows: list[tuple[str, list[float], bool]]) -> None:
        """``rows``: (label, samples, is_ours); ``ours`` names the row baselines are compared to."""
        self.groups.append((group, ours, [(label, _stats(s), mine) for label, s, mine in rows]))
        progress(f"measured {group}")

    def median(self, group: str, label: str) -> float:
        for g, _, rows in self.groups:
            if g == group:
                for lab, st, _ in rows:
                    if lab == label:
                        return st["median"]
        raise KeyError((group, label))


def print_table(res: Results, unit_of: Callable[[str], str]) -> None:
    print(f"\n{'case':<62} {'median':>11} {'min–max':>21} {'× ours':>8}")
    for group, ours, rows in res.groups:
        unit = unit_of(group)
        ref = next(st["median"] for lab, st, _ in rows if lab == ours)
        print(f"{group} [{unit}]  (× ours: this row / '{ours}')")
        for label, st, mine in rows:
            ratio = "" if label == ours else f"{st['median'] / ref:8.2f}"
            mark = "*" if mine else " "
            print(f"  {mark}{label:<59} {st['median']:11.1f} {st['min']:10.1f}–{st['max']:<10.1f} {ratio:>8}")


# ---------------------------------------------------------------------------- baselines

def pydantic_ai_tool(fn: Callable[..., Any]) -> Any:
    from pydantic_ai import Tool

    return Tool(fn, takes_ctx=False, docstring_format="google", require_parameter_descriptions=True)


def langchain_tool(fn: Callable[..., Any]) -> Any:
    from langchain_core.tools import StructuredTool

    if asyncio.iscoroutinefunction(fn):
        t = StructuredTool.from_function(coroutine=fn, parse_docstring=True)
    else:
        t = StructuredTool.from_function(fn, parse_docstring=True)
    return t


def langchain_define(fn: Callable[..., Any]) -> Any:
    """A langchain tool up to its model-facing schema (``from_function`` builds the pydantic
    model; the JSON Schema is produced on first use)."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    t = langchain_tool(fn)
    convert_to_openai_tool(t)
    return t


def pai_error_text(fs: Any, name: str, args: Any) -> str:
    """pydantic-ai's model-facing text for arguments that fail validation (what its agent loop
    sends back in a ``RetryPromptPart``)."""
    from pydantic import ValidationError
    from pydantic_ai.messages import RetryPromptPart

    try:
        fs.validator.validate_python(args)
    except ValidationError as e:
        with warnings.catch_warnings():  # deprecated in pydantic-ai 2.x, still what its loop sends
            warnings.simplefilter("ignore")
            part = RetryPromptPart(tool_name=name, content=e.errors(include_url=False), tool_call_id="c1")
        return part.model_response()
    raise AssertionError("expected a validation error")


def lc_error_text(t: Any, args: Any) -> str:
    from pydantic import ValidationError

    try:
        t.invoke(args)
    except ValidationError as e:
        return str(e)
    raise AssertionError("expected a validation error")


# ---------------------------------------------------------------------------- the measurements

async def m1(res: Results, scale: float) -> None:
    n = max(20, int(200 * scale))
    rep = 7
    rows = [
        ("ours: tool(fn, read_only=True)", time_each(make_fn, lambda f: tool(f, read_only=True), n, rep), True),
        ("jsonschema baseline: define(fn)", time_each(make_fn, jsb.define, max(10, n // 4), rep), False),
        ("jsonschema baseline: define(fn) without check_schema",
         time_each(make_fn, lambda f: jsb.define(f, check_schema=False), n, rep), False),
        ("pydantic-ai: Tool(fn)", time_each(make_fn, pydantic_ai_tool, max(10, n // 4), rep), False),
        ("langchain-core: from_function + schema", time_each(make_fn, langchain_define, max(10, n // 4), rep), False),
    ]
    res.add("M1 definition", rows[0][0], await interleave(rows, rep))


def _setup_calls() -> dict[str, Any]:
    sync_fn = make_fn("search_docs")
    async_fn = make_fn("search_docs_async", is_async=True)
    inline = tool(make_fn("search_docs_inline"), read_only=True)
    inline.non_blocking = True  # type: ignore[attr-defined]
    offloop = tool(sync_fn, read_only=True)
    atool = tool(async_fn, read_only=True)
    reg = ToolRegistry([inline, offloop, atool])
    from agentkit_tools.middleware import approval, audit, idempotency, repeat_guard, retry, timeout

    # The default chain, with a repeat limit the benchmark's identical calls never reach.
    chain = [audit(), approval(), repeat_guard(limit=10**9), idempotency(), retry(), timeout()]
    inv = Invoker(reg, middleware=chain)
    base = {t.__name__: jsb.define(t) for t in (sync_fn, async_fn)}
    pai_sync, pai_async = pydantic_ai_tool(sync_fn), pydantic_ai_tool(async_fn)
    lc_sync, lc_async = langchain_tool(sync_fn), langchain_tool(async_fn)
    return dict(sync_fn=sync_fn, async_fn=async_fn, inline=inline, offloop=offloop, atool=atool, reg=reg, inv=inv,
                base=base, pai_sync=pai_sync, pai_async=pai_async, lc_sync=lc_sync, lc_async=lc_async)


def _check(env: Any) -> Any:
    assert env["ok"] and env["value"] == EXPECTED, env
    return env


async def m2(res: Results, s: dict[str, Any], scale: float) -> None:
    n = max(200, int(5000 * scale))
    rep = 7
    reg, inv, base = s["reg"], s["inv"], s["base"]
    fn, afn = s["sync_fn"], s["async_fn"]
    pai_s, pai_a = s["pai_sync"].function_schema, s["pai_async"].function_schema
    lc_s, lc_a = s["lc_sync"], s["lc_async"]
    core_validate = s["inline"]._core.validate
    executor = concurrent.futures.ThreadPoolExecutor()  # the dispatch baseline: a sync caller's pool

    for kind, payload in (("mapping", ARGS), ("JSON text", ARGS_JSON)):
        calls = {nm: {"id": "c1", "name": nm, "input": payload}
                 for nm in ("search_docs_inline", "search_docs", "search_docs_async")}
        bcall = {nm: {"id": "c1", "name": nm, "input": payload} for nm in ("search_docs", "search_docs_async")}
        for c in calls.values():
            _check(dispatch(c, reg))
            _check(await inv.invoke(c))
        pai_validate = pai_s.validator.validate_python if kind == "mapping" else pai_s.validator.validate_json
        pai_avalidate = pai_a.validator.validate_python if kind == "mapping" else pai_a.validator.validate_json
        assert (await pai_s.call(pai_validate(payload), None)) == EXPECTED
        assert lc_s.invoke(json.loads(ARGS_JSON)) == EXPECTED
        tag = "M2" if kind == "mapping" else "M2b"

        c_in, c_off, c_as = calls["search_docs_inline"], calls["search_docs"], calls["search_docs_async"]
        loads = json.loads

        def floor() -> Any:
            return fn(**core_validate(payload))

        def direct() -> Any:
            return fn(**ARGS) if kind == "mapping" else fn(**loads(payload))

        async def pai_call_sync() -> Any:
            return await pai_s.call(pai_validate(payload), None)

        async def pai_call_async() -> Any:
            return await pai_a.call(pai_avalidate(payload), None)

        def lc_invoke() -> Any:
            return lc_s.invoke(payload if kind == "mapping" else loads(payload))

        async def lc_ainvoke_sync() -> Any:
            return await lc_s.ainvoke(payload if kind == "mapping" else loads(payload))

        async def lc_ainvoke_async() -> Any:
            return await lc_a.ainvoke(payload if kind == "mapping" else loads(payload))

        async def to_thread_same() -> Any:
            return await asyncio.to_thread(fn, **core_validate(payload))

        async def afloor() -> Any:
            return await afn(**core_validate(payload))

        def executor_same() -> Any:
            return executor.submit(fn, **core_validate(payload)).result()

        rows = [
            ("ours: dispatch", time_sync(lambda: dispatch(c_in, reg), n, rep), True),
            ("ours: Invoker.invoke", await time_async(lambda: inv.invoke(c_in), n, rep), True),
            ("direct fn(**args)" + (" after json.loads" if kind != "mapping" else ""), time_sync(direct, n, rep), False),
            ("floor: fn(**core.validate(args))", time_sync(floor, n, rep), False),
            ("jsonschema baseline: dispatch", time_sync(lambda: jsb.dispatch(bcall["search_docs"], base), n, rep), False),
            ("pydantic-ai: validate + FunctionSchema.call", await time_async(pai_call_sync, n // 4, rep), False),
            ("pydantic-ai: validate only (no call)", time_sync(lambda: pai_validate(payload), n, rep), False),
            ("langchain-core: tool.invoke", time_sync(lc_invoke, n // 10, rep), False),
        ]
        res.add(f"{tag} ({kind}) sync tool inline", "ours: dispatch", await interleave(rows, rep))

        rows = [
            ("ours: Invoker.invoke (Rust worker pool)", await time_async(lambda: inv.invoke(c_off), n // 2, rep), True),
            ("ours: dispatch (worker thread)", time_sync(lambda: dispatch(c_off, reg), n // 2, rep), True),
            ("same call via asyncio.to_thread", await time_async(to_thread_same, n // 2, rep), False),
            ("same call via ThreadPoolExecutor.submit().result()", time_sync(executor_same, n // 2, rep), False),
            ("jsonschema baseline + asyncio.to_thread",
             await time_async(lambda: jsb.adispatch(bcall["search_docs"], base, to_thread=True), n // 2, rep), False),
            ("pydantic-ai: validate + FunctionSchema.call", await time_async(pai_call_sync, n // 4, rep), False),
            ("langchain-core: await tool.ainvoke", await time_async(lc_ainvoke_sync, n // 10, rep), False),
        ]
        res.add(f"{tag} ({kind}) sync tool off the loop", rows[0][0], await interleave(rows, rep))

        rows = [
            ("ours: Invoker.invoke", await time_async(lambda: inv.invoke(c_as), n, rep), True),
            ("ours: dispatch (the background loop)", time_sync(lambda: dispatch(c_as, reg), n // 10, rep), True),
            ("floor: await fn(**core.validate(args))", await time_async(afloor, n, rep), False),
            ("jsonschema baseline: adispatch",
             await time_async(lambda: jsb.adispatch(bcall["search_docs_async"], base), n, rep), False),
            ("pydantic-ai: validate + FunctionSchema.call", await time_async(pai_call_async, n // 2, rep), False),
            ("langchain-core: await tool.ainvoke", await time_async(lc_ainvoke_async, n // 10, rep), False),
        ]
        res.add(f"{tag} ({kind}) async tool", rows[0][0], await interleave(rows, rep))


async def m3(res: Results, s: dict[str, Any], scale: float) -> dict[str, str]:
    n = max(200, int(3000 * scale))
    rep = 7
    reg, inv, base = s["reg"], s["inv"], s["base"]
    call = {"id": "c1", "name": "search_docs", "input": BAD_ARGS}
    pai_s, lc_s = s["pai_sync"].function_schema, s["lc_sync"]
    messages = {
        "ours": dispatch(call, reg)["error"]["message"],
        "jsonschema baseline": jsb.dispatch(call, base)["error"]["message"],
        "pydantic-ai": pai_error_text(pai_s, "search_docs", BAD_ARGS),
        "langchain-core": lc_error_text(lc_s, BAD_ARGS),
    }
    env = await inv.invoke(call)
    assert env["error"]["message"] == messages["ours"], env
    rows = [
        ("ours: dispatch → envelope", time_sync(lambda: dispatch(call, reg), n, rep), True),
        ("ours: Invoker.invoke → envelope", await time_async(lambda: inv.invoke(call), n, rep), True),
        ("jsonschema baseline: dispatch → envelope", time_sync(lambda: jsb.dispatch(call, base), n, rep), False),
        ("pydantic-ai: validate → RetryPromptPart text",
         time_sync(lambda: pai_error_text(pai_s, "search_docs", BAD_ARGS), n, rep), False),
        ("langchain-core: invoke → ValidationError text", time_sync(lambda: lc_error_text(lc_s, BAD_ARGS), n // 4, rep), False),
    ]
    res.add("M3 invalid call (2 problems)", rows[0][0], await interleave(rows, rep))
    return messages


async def m5(res: Results, s: dict[str, Any], scale: float, rounds: int = 7) -> None:
    rep = rounds
    sleeper = make_fn("sleepy", is_async=True, body="await asyncio.sleep(0.01)")
    t = tool(sleeper, read_only=True)
    inv = Invoker(ToolRegistry([t]))  # the default chain; 1,000 distinct calls (limit varies)
    bare = Invoker(ToolRegistry([t]), middleware=[])
    pai = pydantic_ai_tool(sleeper).function_schema
    lc = langchain_tool(sleeper)
    argsets = [{**ARGS, "limit": 4 + i} for i in range(1000)]
    calls = [{"id": f"c{i}", "name": "sleepy", "input": a} for i, a in enumerate(argsets)]

    async def gather_bare() -> Any:
        return await asyncio.gather(*(sleeper(**a) for a in argsets))

    async def ours() -> Any:
        envs = await inv.invoke_many(calls)
        inv.forget(inv.default_scope)
        return envs

    async def ours_bare() -> Any:
        return await bare.invoke_many(calls)

    async def pai_gather() -> Any:
        return await asyncio.gather(*(pai.call(pai.validator.validate_python(a), None) for a in argsets))

    async def lc_gather() -> Any:
        return await asyncio.gather(*(lc.ainvoke(a) for a in argsets))

    cases = {
        "ours: Invoker.invoke_many (default chain)": ours,
        "ours: Invoker.invoke_many (middleware=[])": ours_bare,
        "bare asyncio.gather of the coroutines": gather_bare,
        "pydantic-ai: gather(validate + call)": pai_gather,
        "langchain-core: gather(ainvoke)": lc_gather,
    }
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for f in cases.values():  # warm up
        await f()
    order = list(cases)
    for r in range(rep):
        # Interleaved rounds, in an order shuffled per round (seeded): in a fixed order the same
        # case always ran first after langchain-core's (180 ms of other code, caches left cold),
        # about 1% slower than in any other place, whichever case it was.
        random.Random(r).shuffle(order)
        for k in order:
            gc.collect()
            t0 = time.perf_counter()
            out = await cases[k]()
            samples[k].append((time.perf_counter() - t0) * 1e3)
            if k.startswith("ours"):  # checked outside the timing, as the others' results are not checked
                assert all(e["ok"] for e in out), out[0]
    res.add("M5 1,000 concurrent 10 ms async calls", "ours: Invoker.invoke_many (default chain)",
            [(k, v, k.startswith("ours")) for k, v in samples.items()])


# ---------------------------------------------------------------------------- M7/M8: integrations
# M7: one tool call through each agent framework, with our tool (agentkit_tools.frameworks)
# against the same framework's native tool of the same async function; M8: one MCP tools/call
# round trip to an in-process MCPServer, through our client (MCPToolset + Invoker: our
# validation, middleware, result mapping) against the SDK's ClientSession.call_tool alone.

def _agents_scripted_model(name: str) -> Any:
    """An Agents SDK ``Model`` replaying one tool call of ``name`` then a final answer."""
    from agents import ModelResponse, Usage
    from agents.models.interface import Model
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    call = ResponseFunctionToolCall(type="function_call", call_id="c1", name=name, arguments=ARGS_JSON, id="fc_1", status="completed")
    final = ResponseOutputMessage(id="m1", type="message", role="assistant", status="completed",
                                  content=[ResponseOutputText(type="output_text", text="done", annotations=[])])

    class Scripted(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            done = isinstance(input, list) and any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in input)
            return ModelResponse(output=[final] if done else [call], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Scripted()


def _pai_function_model(name: str) -> Any:
    """A pydantic-ai ``FunctionModel`` making one tool call of ``name`` then answering."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def model(messages: Any, info: Any) -> Any:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(name, dict(ARGS), tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(model)


async def m7_frameworks(res: Results, scale: float) -> None:
    from agents import Agent as OAgent, Runner, function_tool, set_tracing_disabled
    from agents.tool_context import ToolContext as OToolContext
    from langchain_core.tools import StructuredTool
    from pydantic_ai import Agent as PAgent

    from agentkit_tools.frameworks import langchain as fw_lc, openai_agents as fw_oa, pydantic_ai as fw_pai

    set_tracing_disabled(True)
    rep = 7
    n = max(20, int(300 * scale))
    afn = make_fn("search_docs", is_async=True)
    ours_tool = tool(afn, read_only=True)
    from agentkit_tools.middleware import approval, audit, idempotency, repeat_guard, retry, timeout

    inv = Invoker(ToolRegistry([ours_tool]), middleware=[audit(), approval(), repeat_guard(limit=10**9), idempotency(), retry(), timeout()])
    expected_text = json.dumps(EXPECTED)

    # langchain-core: the tool-call entry point (ToolCall in, ToolMessage out)
    [lc_ours] = fw_lc.tools(ours_tool, invoker=inv)
    lc_native = StructuredTool.from_function(coroutine=afn, parse_docstring=True)
    tc = {"name": "search_docs", "args": dict(ARGS), "id": "c1", "type": "tool_call"}
    assert (await lc_ours.ainvoke(tc)).content == expected_text
    assert (await lc_native.ainvoke(tc)).content == EXPECTED  # a list is a list of content blocks to LangChain

    # OpenAI Agents SDK: FunctionTool.on_invoke_tool (the SDK's per-call entry), and a whole run
    [oa_ours] = fw_oa.tools(ours_tool, invoker=inv)
    oa_native = function_tool(afn)
    octx = OToolContext(context=None, tool_name="search_docs", tool_call_id="c1", tool_arguments=ARGS_JSON)
    assert await oa_ours.on_invoke_tool(octx, ARGS_JSON) == expected_text
    assert await oa_native.on_invoke_tool(octx, ARGS_JSON) == EXPECTED
    oa_agent_ours = OAgent(name="a", model=_agents_scripted_model("search_docs"), tools=[oa_ours])
    oa_agent_native = OAgent(name="a", model=_agents_scripted_model("search_docs"), tools=[oa_native])
    assert (await Runner.run(oa_agent_ours, "q")).final_output == "done"
    assert (await Runner.run(oa_agent_native, "q")).final_output == "done"

    # pydantic-ai: a whole agent run (one tool call, then the answer)
    pai_ours = PAgent(_pai_function_model("search_docs"), toolsets=[fw_pai.toolset(ours_tool, invoker=inv)])
    pai_native = PAgent(_pai_function_model("search_docs"), tools=[pydantic_ai_tool(afn)])
    assert (await pai_ours.run("q")).output == "done"
    assert (await pai_native.run("q")).output == "done"

    rows = [
        ("ours: langchain adapter tool.ainvoke(ToolCall)", await time_async(lambda: lc_ours.ainvoke(tc), n * 4, rep), True),
        ("langchain-core: StructuredTool.ainvoke(ToolCall)", await time_async(lambda: lc_native.ainvoke(tc), n * 4, rep), False),
    ]
    res.add("M7a langchain-core: one tool call (async tool)", rows[0][0], await interleave(rows, rep))
    rows = [
        ("ours: Agents SDK adapter on_invoke_tool", await time_async(lambda: oa_ours.on_invoke_tool(octx, ARGS_JSON), n * 4, rep), True),
        ("openai-agents: function_tool(fn).on_invoke_tool", await time_async(lambda: oa_native.on_invoke_tool(octx, ARGS_JSON), n * 4, rep), False),
    ]
    res.add("M7b OpenAI Agents SDK: one tool call (async tool)", rows[0][0], await interleave(rows, rep))
    rows = [
        ("ours: Runner.run with the adapter's tool", await time_async(lambda: Runner.run(oa_agent_ours, "q"), n, rep), True),
        ("openai-agents: Runner.run with function_tool(fn)", await time_async(lambda: Runner.run(oa_agent_native, "q"), n, rep), False),
    ]
    res.add("M7c OpenAI Agents SDK: agent run with one tool call", rows[0][0], await interleave(rows, rep))
    rows = [
        ("ours: Agent.run with the adapter's toolset", await time_async(lambda: pai_ours.run("q"), n, rep), True),
        ("pydantic-ai: Agent.run with Tool(fn)", await time_async(lambda: pai_native.run("q"), n, rep), False),
    ]
    res.add("M7d pydantic-ai: agent run with one tool call", rows[0][0], await interleave(rows, rep))


async def m8_mcp(res: Results, scale: float) -> None:
    from mcp import Client
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    from agentkit_tools.mcp_client import MCPToolset

    rep = 7
    n = max(50, int(1000 * scale))
    server = MCPServer("bench")
    # read-only, as a search is: a side-effecting tool's identical calls would be deduplicated
    server.tool(annotations=ToolAnnotations(read_only_hint=True))(make_fn("search_docs", is_async=True))
    async with Client(server) as client, MCPToolset(server) as tools:
        await client.list_tools()  # the SDK validates structured results against the listed output schema
        inv = Invoker(tools.registry(), middleware=[])
        from agentkit_tools.middleware import approval, audit, idempotency, repeat_guard, retry, timeout

        chain = Invoker(tools.registry(), middleware=[audit(), approval(), repeat_guard(limit=10**9), idempotency(), retry(), timeout()])
        call = {"id": "c1", "name": "search_docs", "input": ARGS}
        assert (await inv.invoke(call))["value"] == {"result": EXPECTED}
        assert (await chain.invoke(call))["value"] == {"result": EXPECTED}
        assert (await client.session.call_tool("search_docs", dict(ARGS))).structured_content == {"result": EXPECTED}
        rows = [
            ("ours: MCPToolset tool via Invoker.invoke (default chain)", await time_async(lambda: chain.invoke(call), n, rep), True),
            ("ours: MCPToolset tool via Invoker.invoke (middleware=[])", await time_async(lambda: inv.invoke(call), n, rep), True),
            ("mcp SDK: ClientSession.call_tool alone", await time_async(lambda: client.session.call_tool("search_docs", dict(ARGS)), n, rep), False),
            ("mcp SDK: Client.call_tool", await time_async(lambda: client.call_tool("search_docs", dict(ARGS)), n, rep), False),
        ]
        res.add("M8 MCP tools/call round trip (in-process MCPServer)", rows[0][0], await interleave(rows, rep))


def m6_ours(count: int) -> list[dict[str, Any]]:
    fns = [make_fn(f"search_docs_{i}") for i in range(count)]
    t0 = time.perf_counter()
    reg = ToolRegistry([tool(f, read_only=True) for f in fns])
    out = reg.to_openai()
    return [time.perf_counter() - t0, out]  # type: ignore[list-item]


def m6_baseline(count: int) -> list[Any]:
    fns = [make_fn(f"search_docs_{i}") for i in range(count)]
    t0 = time.perf_counter()
    reg = {}
    for f in fns:
        t = jsb.define(f)
        reg[t.name] = t
    out = jsb.render_openai(reg)
    return [time.perf_counter() - t0, out]


def m6_pai(count: int) -> list[Any]:
    from pydantic_ai.toolsets import FunctionToolset

    fns = [make_fn(f"search_docs_{i}") for i in range(count)]
    t0 = time.perf_counter()
    ts = FunctionToolset([pydantic_ai_tool(f) for f in fns])
    out = [{"type": "function", "function": {"name": t.name, "description": t.tool_def.description,
                                              "parameters": t.tool_def.parameters_json_schema}}
           for t in sorted(ts.tools.values(), key=lambda t: t.name)]
    return [time.perf_counter() - t0, out]


def m6_lc(count: int) -> list[Any]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    fns = [make_fn(f"search_docs_{i}") for i in range(count)]
    t0 = time.perf_counter()
    tools = {t.name: t for t in (langchain_tool(f) for f in fns)}
    out = [convert_to_openai_tool(tools[k]) for k in sorted(tools)]
    return [time.perf_counter() - t0, out]


def m6(res: Results, scale: float) -> None:
    count = max(100, int(2000 * min(scale, 1.0)))
    rep = 5
    cases = [
        ("ours: tool() ×N, ToolRegistry, to_openai()", m6_ours, rep, True),
        ("jsonschema baseline: define ×N, render_openai", m6_baseline, 3, False),
        ("pydantic-ai: Tool ×N, FunctionToolset, tool defs", m6_pai, 3, False),
        ("langchain-core: from_function ×N, convert_to_openai_tool", m6_lc, 3, False),
    ]
    mine = m6_ours(3)[1]
    theirs = m6_baseline(3)[1]
    assert [t["function"]["name"] for t in mine] == [t["function"]["name"] for t in theirs]
    rows = []
    for label, f, r, ours in cases:
        samples = []
        for _ in range(r):
            gc.collect()
            samples.append(f(count)[0] * 1e3)
        rows.append((label, samples, ours))
    res.add(f"M6 define+register {count} tools, render", rows[0][0], rows)


# ---------------------------------------------------------------------------- memory (subprocesses)

def _status_kb(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmRSS``, ``VmHWM``: the peak RSS of this
    process image; ``ru_maxrss`` would include the parent's before ``exec``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _child(mode: str, count: int) -> None:
    def rss_kb() -> int:
        return _status_kb("VmRSS")

    logging.getLogger("agentkit_tools").setLevel(logging.WARNING)
    if mode == "m6":
        before = rss_kb()
        elapsed, out = m6_ours(count)
        assert len(out) == count
        peak = _status_kb("VmHWM")
        print(json.dumps({"tools": count, "rss_before_kb": before, "peak_rss_kb": peak, "seconds": elapsed}))
        return
    # per-call leak check: RSS after a warm-up, then after `count` more calls
    inline = tool(make_fn("search_docs_inline"), read_only=True)
    inline.non_blocking = True  # type: ignore[attr-defined]
    reg = ToolRegistry([inline])
    call = {"id": "c1", "name": "search_docs_inline", "input": ARGS}
    bad = {"id": "c1", "name": "search_docs_inline", "input": BAD_ARGS}
    text = {"id": "c1", "name": "search_docs_inline", "input": ARGS_JSON}
    if mode == "dispatch":
        def run(k: int) -> None:
            for i in range(k):
                dispatch(call if i % 3 == 0 else bad if i % 3 == 1 else text, reg)
    else:
        inv = Invoker(reg)

        async def many(k: int) -> None:
            for i in range(k):
                c = {"id": "c", "name": "search_docs_inline", "input": {**ARGS, "limit": i % 97 + 4}}
                await inv.invoke(c if i % 3 else bad)
                if i % 10000 == 0:
                    inv.forget(inv.default_scope)

        def run(k: int) -> None:
            asyncio.run(many(k))
    run(count // 10)
    gc.collect()
    before = rss_kb()
    t0 = time.perf_counter()
    run(count)
    gc.collect()
    after = rss_kb()
    print(json.dumps({"calls": count, "rss_before_kb": before, "rss_after_kb": after,
                      "bytes_per_call": (after - before) * 1024 / count, "seconds": time.perf_counter() - t0}))


def _spawn(mode: str, count: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(count)], capture_output=True, text=True,
                         check=True, env=os.environ)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def memory(quick: bool) -> dict[str, Any]:
    small, large = (200, 2000) if quick else (2000, 20000)
    calls = 100_000 if quick else 1_000_000
    progress("memory: peak RSS of M6 and a long run of calls, in fresh subprocesses")
    base = _spawn("m6", 1)
    m_small, m_large = _spawn("m6", small), _spawn("m6", large)
    per_tool = (m_large["peak_rss_kb"] - m_small["peak_rss_kb"]) * 1024 / (large - small)
    per_tool_small = (m_small["peak_rss_kb"] - base["peak_rss_kb"]) * 1024 / (small - 1)
    leak_dispatch = _spawn("dispatch", calls)
    leak_invoke = _spawn("invoke", calls // 2)
    return {"m6_1": base, "m6_small": m_small, "m6_large": m_large, "bytes_per_tool_small_to_large": per_tool,
            "bytes_per_tool_1_to_small": per_tool_small, "leak_dispatch": leak_dispatch, "leak_invoke": leak_invoke}


# ---------------------------------------------------------------------------- targets

def targets(res: Results) -> list[tuple[str, float, str, bool]]:
    """The targets of the groups measured (all, or the one ``--only`` names)."""
    measured = {g for g, _, _ in res.groups}
    out: list[tuple[str, float, str, bool]] = []

    def m(group: str, label: str) -> float | None:
        return res.median(group, label) if group in measured else None

    def faster(label: str, theirs: float | None, ours: float | None, want: float) -> None:
        if theirs is None or ours is None:
            return
        r = theirs / ours
        out.append((label, r, f">= {want}x faster", r >= want))

    def within(label: str, ours: float | None, ref: float | None, limit: float) -> None:
        if ours is None or ref is None:
            return
        r = ours / ref
        out.append((label, r, f"<= {limit}x", r <= limit))

    g = "M1 definition"
    o = m(g, "ours: tool(fn, read_only=True)")
    faster("M1 vs jsonschema baseline", m(g, "jsonschema baseline: define(fn)"), o, 2)
    faster("M1 vs jsonschema baseline without check_schema",
           m(g, "jsonschema baseline: define(fn) without check_schema"), o, 2)
    faster("M1 vs pydantic-ai", m(g, "pydantic-ai: Tool(fn)"), o, 20)
    faster("M1 vs langchain-core", m(g, "langchain-core: from_function + schema"), o, 20)
    for tag, kind in (("M2", "mapping"), ("M2b", "JSON text")):
        g = f"{tag} ({kind}) sync tool inline"
        floor = m(g, "floor: fn(**core.validate(args))")
        for who, limit in (("ours: dispatch", 3), ("ours: Invoker.invoke", 2)):
            within(f"{tag} inline {who[6:]} / floor", m(g, who), floor, limit)
            faster(f"{tag} inline {who[6:]} vs pydantic-ai", m(g, "pydantic-ai: validate + FunctionSchema.call"), m(g, who), 20)
        g = f"{tag} ({kind}) async tool"
        within(f"{tag} async Invoker.invoke / floor", m(g, "ours: Invoker.invoke"), m(g, "floor: await fn(**core.validate(args))"), 2)
    g = "M2 (mapping) sync tool off the loop"
    faster("M2 off-loop Invoker.invoke vs asyncio.to_thread", m(g, "same call via asyncio.to_thread"),
           m(g, "ours: Invoker.invoke (Rust worker pool)"), 3)
    faster("M2 off-loop dispatch vs ThreadPoolExecutor.submit().result()",
           m(g, "same call via ThreadPoolExecutor.submit().result()"), m(g, "ours: dispatch (worker thread)"), 2)
    g = "M3 invalid call (2 problems)"
    faster("M3 dispatch vs pydantic-ai", m(g, "pydantic-ai: validate → RetryPromptPart text"), m(g, "ours: dispatch → envelope"), 2)
    faster("M3 Invoker.invoke vs pydantic-ai", m(g, "pydantic-ai: validate → RetryPromptPart text"),
           m(g, "ours: Invoker.invoke → envelope"), 2)
    g = "M5 1,000 concurrent 10 ms async calls"
    within("M5 invoke_many / bare gather", m(g, "ours: Invoker.invoke_many (default chain)"),
           m(g, "bare asyncio.gather of the coroutines"), 1.1)
    g = next((gr for gr, _, _ in res.groups if gr.startswith("M6")), "M6")
    faster("M6 vs jsonschema baseline", m(g, "jsonschema baseline: define ×N, render_openai"),
           m(g, "ours: tool() ×N, ToolRegistry, to_openai()"), 2)
    return out


async def main_async(res: Results, scale: float, skip_integrations: bool = False) -> dict[str, str]:
    await m1(res, scale)
    s = _setup_calls()
    await m2(res, s, scale)
    messages = await m3(res, s, scale)
    await m5(res, s, scale)
    if not skip_integrations:
        await integrations(res, scale)
    return messages


async def integrations(res: Results, scale: float) -> None:
    await m7_frameworks(res, scale)
    await m8_mcp(res, scale)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run (smaller counts)")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--only-integrations", action="store_true", help="only M7 (frameworks) and M8 (MCP client)")
    ap.add_argument("--no-integrations", action="store_true", help="skip M7 (frameworks) and M8 (MCP client)")
    ap.add_argument("--only", choices=["M5"], help="only this group, its table and its target (writes nothing)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds of M5, the median of them reported (default 7)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        _child(ns.child[0], int(ns.child[1]))
        return
    logging.getLogger("agentkit_tools").setLevel(logging.WARNING)
    scale = 0.1 if ns.quick else 1.0
    started = time.perf_counter()
    import pydantic_ai
    import langchain_core

    print(f"Python {sys.version.split()[0]} on {platform.machine()}, {os.cpu_count()} CPUs; agentkit core "
          f"{Path(_core.__file__).name} ({_core.__file__}); pydantic-ai {pydantic_ai.__version__}, "
          f"langchain-core {langchain_core.__version__}, jsonschema {importlib.metadata.version('jsonschema')}")
    # Every library is imported and warm: move what exists now out of the collector's reach, so
    # that a full collection over pydantic/langchain's module objects does not land at random in
    # one case's timing (applies to all cases alike).
    for lib in (pydantic_ai_tool, langchain_define):
        lib(make_fn())
    gc.collect()
    gc.freeze()
    res = Results()
    if ns.only == "M5":
        asyncio.run(m5(res, {}, scale, ns.rounds))
        print_table(res, lambda group: "ms per run")
        for label, ratio, want, ok in targets(res):
            print(f"  {'MET ' if ok else 'MISS'} {label:<52} {ratio:7.2f}x  (want {want})")
        return
    if ns.only_integrations:
        asyncio.run(integrations(res, scale))
        print_table(res, lambda group: "µs per call" if "one tool call" in group or group.startswith("M8") else "µs per run")
        path = HERE / "results" / "compare-integrations.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps([{"group": g, "ours": o, "rows": [{"label": lab, **st} for lab, st, _ in rows]}
                                    for g, o, rows in res.groups], indent=2))
        print(f"wrote {path}")
        return
    messages = asyncio.run(main_async(res, scale, ns.no_integrations))
    m6(res, scale)
    mem = None if ns.no_memory else memory(ns.quick)

    def unit(group: str) -> str:
        if group.startswith(("M7c", "M7d")):
            return "µs per run"
        return "ms per run" if group.startswith(("M5", "M6")) else "µs per call"

    print_table(res, unit)
    print("\nM3 model-facing messages:")
    for who, msg in messages.items():
        print(f"  {who}: {msg!r}")
    if mem is not None:
        print("\nmemory (fresh subprocesses):")
        for key in ("m6_1", "m6_small", "m6_large"):
            r = mem[key]
            print(f"  M6 with {r['tools']:>6} tools: peak RSS {r['peak_rss_kb'] / 1024:8.1f} MiB")
        print(f"  per tool: {mem['bytes_per_tool_1_to_small'] / 1024:.1f} KiB (1 → {mem['m6_small']['tools']}), "
              f"{mem['bytes_per_tool_small_to_large'] / 1024:.1f} KiB ({mem['m6_small']['tools']} → {mem['m6_large']['tools']})")
        for key in ("leak_dispatch", "leak_invoke"):
            r = mem[key]
            print(f"  {key[5:]}: {r['calls']} calls, RSS {r['rss_before_kb'] / 1024:.1f} → {r['rss_after_kb'] / 1024:.1f} MiB "
                  f"({r['bytes_per_call']:.3f} bytes/call)")
    tg = targets(res)
    print("\ntargets:")
    for label, ratio, want, ok in tg:
        print(f"  {'MET ' if ok else 'MISS'} {label:<52} {ratio:7.2f}x  (want {want})")
    total = time.perf_counter() - started
    print(f"\ntotal {total:.0f} s")
    out = {
        "python": sys.version, "machine": platform.machine(), "cpus": os.cpu_count(), "quick": ns.quick,
        "groups": [{"group": g, "ours": o, "rows": [{"label": lab, **st, "ours": mine} for lab, st, mine in rows]}
                   for g, o, rows in res.groups],
        "m3_messages": messages, "memory": mem,
        "targets": [{"target": lab, "ratio": r, "want": w, "met": ok} for lab, r, w, ok in tg],
        "seconds": total,
    }
    (HERE / "results").mkdir(exist_ok=True)
    path = HERE / "results" / ("compare-quick.json" if ns.quick else "compare.json")
    path.write_text(json.dumps(out, indent=2, ensure_ascii=False))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

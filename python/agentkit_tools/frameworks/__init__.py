"""Our tools inside other agent frameworks, each an optional extra:

- ``agentkit_tools.frameworks.openai_agents``: ``FunctionTool`` objects of the OpenAI Agents SDK
  (``pip install 'agentkit-tools[openai-agents]'``);
- ``agentkit_tools.frameworks.pydantic_ai``: pydantic-ai ``Tool`` objects and a
  ``FunctionToolset`` (``pip install 'agentkit-tools[pydantic-ai]'``);
- ``agentkit_tools.frameworks.langchain``: langchain-core ``BaseTool`` objects
  (``pip install 'agentkit-tools[langchain]'``).

Each adapter takes a tool, a ``ToolRegistry`` or a list of tools, and an optional ``Invoker``
(default: a new one over those tools with the default middleware chain). The framework is
shown our input schema, every call goes through the Invoker (our validation, approval, repeat
detection, idempotency, retry, timeout), and the model reads what our own renderings give it:
the result text (with its character limit), images and files as the framework's media types,
and on failure our actionable message, reported through the framework's own failure path.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping

from ..media import has_media, media_limit, within_limit
from ..roundtrip import _media_parts, result_limit, tool_result_text

__all__ = ["Bridge", "MAX_RUNS", "schema_of"]

#: How many framework runs an adapter keeps Invoker state (repeat counts, idempotency) for.
MAX_RUNS = 1024


class Bridge:
    """The Invoker behind an adapter and the tools it exposes (shared by the adapters)."""

    def __init__(self, source: Any, invoker: Any = None) -> None:
        from ..invoker import Invoker
        from ..registry import ToolRegistry

        if hasattr(source, "_core") and hasattr(source, "names"):  # a ToolRegistry (or a view)
            tools = [source.get(n) for n in source.names()]
            registry = source
        else:
            items = [source] if not isinstance(source, Iterable) or isinstance(source, (str, bytes)) else list(source)
            registry = ToolRegistry(items)
            tools = [registry.get(n) for n in registry.names()]
        if invoker is None:
            invoker = Invoker(registry)
        else:
            missing = [t.name for t in tools if t.name not in invoker.registry]
            if missing:
                raise ValueError(f"the invoker's registry has no tool named {', '.join(map(repr, missing))}")
        self.invoker = invoker
        self.tools = [t for t in tools if getattr(t, "schema", None) is not None]
        self._runs: OrderedDict[str, Any] = OrderedDict()

    def context(self, run_id: Any) -> Any:
        """A ``ToolContext`` for the framework's run ``run_id`` (None: no context). The Invoker
        state of the oldest runs is forgotten beyond :data:`MAX_RUNS` runs, so a long-lived
        adapter does not keep every finished run's repeat counts."""
        if run_id is None:
            return None
        key = str(run_id)
        ctx = self._runs.get(key)
        if ctx is None:
            from ..context import ToolContext

            ctx = self._runs[key] = ToolContext(run_id=key)
            while len(self._runs) > MAX_RUNS:
                old, _ = self._runs.popitem(last=False)
                self.invoker.forget(old)
        else:
            self._runs.move_to_end(key)
        return ctx

    @property
    def registry(self) -> Any:
        return self.invoker.registry

    async def call(self, name: str, arguments: Any, call_id: Any = None, ctx: Any = None) -> dict[str, Any]:
        call: dict[str, Any] = {"name": name, "input": arguments}
        if call_id is not None:
            call["id"] = call_id
        return await self.invoker.invoke(call, ctx)  # type: ignore[no-any-return]

    def call_sync(self, name: str, arguments: Any, call_id: Any = None, ctx: Any = None) -> dict[str, Any]:
        """``call`` from synchronous code: on a private event loop, in a helper thread when this
        thread already runs one."""
        coro = self.call(name, arguments, call_id, ctx)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["env"] = asyncio.run(coro)
            except BaseException as exc:  # handed to the caller's thread
                box["exc"] = exc

        thread = threading.Thread(target=run, name="agentkit-sync-call")
        thread.start()
        thread.join()
        if "exc" in box:
            raise box["exc"]
        return box["env"]  # type: ignore[no-any-return]

    def read(self, name: str, envelope: Mapping[str, Any]) -> tuple[bool, Any]:
        """``(ok, what the model reads)``: the text of the envelope (the value's rendering within
        the tool's character limit, or the error's message), or for a successful result holding
        images or files its parts (``str`` / ``ToolImage`` / ``ToolFile``, an item over the byte
        limit replaced by a notice)."""
        limit = result_limit(self.registry, name)
        ok = bool(envelope.get("ok"))
        if ok and has_media(envelope.get("value")):
            parts = _media_parts(envelope, limit) or []
            return True, within_limit(parts, media_limit(self.registry, name))
        return ok, tool_result_text(envelope, max_chars=limit)


def schema_of(tool: Any) -> dict[str, Any]:
    """The input schema of ``tool`` as plain, mutable JSON data (a copy)."""
    import json

    return json.loads(json.dumps(tool.schema.parameters))  # type: ignore[no-any-return]


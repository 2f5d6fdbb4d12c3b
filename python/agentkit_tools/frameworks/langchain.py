"""Our tools as langchain-core tools (``pip install 'agentkit-tools[langchain]'``)::

    from agentkit_tools.frameworks.langchain import tools

    model = ChatOpenAI(...).bind_tools(tools(registry))

Each tool is a ``BaseTool`` whose ``args_schema`` is our input schema (a JSON Schema dict, so
LangChain passes the model's arguments through unchanged and our validation decides;
``convert_to_openai_tool`` and every ``bind_tools`` show the model our schema). ``invoke`` /
``ainvoke`` run the call through the Invoker (``invoke`` on a private event loop). A successful
call returns the text our renderings give the model, or for images and files a list of
LangChain content blocks (``text``, ``image``, ``file``, base64); a failed call raises
``ToolException`` with our message, which the tool's ``handle_tool_error=True`` turns into a
``ToolMessage`` with that message and ``status="error"``.

The Invoker's ``ctx`` is a ``ToolContext`` whose ``run_id`` is the LangChain parent run id when
there is one (an agent graph's run), so repeat detection follows the run; ``context=`` (a
function of the tool's ``run_manager``) overrides this.
"""

from __future__ import annotations

from typing import Any, Callable

from . import Bridge, schema_of

__all__ = ["tools", "AgentkitTool"]


def _require() -> Any:
    try:
        import langchain_core.tools
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError("the LangChain adapter needs langchain-core: pip install 'agentkit-tools[langchain]'") from exc
    return langchain_core.tools


def _blocks(parts: list[Any]) -> list[dict[str, Any]]:
    from ..media import ToolImage

    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, str):
            out.append({"type": "text", "text": p})
        elif isinstance(p, ToolImage):
            out.append({"type": "image", "base64": p.base64(), "mime_type": p.mime})
        else:
            out.append({"type": "file", "base64": p.base64(), "mime_type": p.mime, "filename": p.filename()})
    return out


_TOOL_CLASS: Any = None


def _tool_class() -> Any:
    global _TOOL_CLASS
    if _TOOL_CLASS is not None:
        return _TOOL_CLASS
    lc = _require()
    from pydantic import ConfigDict, PrivateAttr

    class AgentkitTool(lc.BaseTool):  # type: ignore[misc, name-defined]
        """A langchain-core ``BaseTool`` calling one of our tools through an ``Invoker``."""

        model_config = ConfigDict(arbitrary_types_allowed=True)
        handle_tool_error: Any = True
        _bridge: Any = PrivateAttr()
        _make_ctx: Any = PrivateAttr()

        def _finish(self, env: dict[str, Any]) -> Any:
            ok, read = self._bridge.read(self.name, env)
            if not ok:
                raise lc.ToolException(read)
            return read if isinstance(read, str) else _blocks(read)

        def _run(self, run_manager: Any = None, **kwargs: Any) -> Any:
            env = self._bridge.call_sync(self.name, kwargs, None, self._make_ctx(run_manager))
            return self._finish(env)

        async def _arun(self, run_manager: Any = None, **kwargs: Any) -> Any:
            env = await self._bridge.call(self.name, kwargs, None, self._make_ctx(run_manager))
            return self._finish(env)

    _TOOL_CLASS = AgentkitTool
    return AgentkitTool


def tools(source: Any, *, invoker: Any = None, context: Callable[[Any], Any] | None = None) -> list[Any]:
    """langchain-core ``BaseTool`` objects for ``source`` (a tool, a ``ToolRegistry`` or a list
    of tools), sorted by name, each calling through ``invoker`` (default: a new ``Invoker`` of
    those tools). Raises ``ImportError`` without langchain-core, ``ValueError`` when
    ``invoker``'s registry lacks one of the tools."""
    cls = _tool_class()
    bridge = Bridge(source, invoker)
    out = []
    for tool in bridge.tools:
        lc_tool = cls(name=tool.name, description=tool.description, args_schema=schema_of(tool))
        lc_tool._bridge = bridge
        lc_tool._make_ctx = context or (lambda rm: bridge.context(getattr(rm, "parent_run_id", None)))
        out.append(lc_tool)
    return out


def __getattr__(name: str) -> Any:
    if name == "AgentkitTool":
        return _tool_class()
    raise AttributeError(name)

"""agentkit-tools: turn Python functions into strictly validated tools for language models.

A drop-in for ``agentkit.tools``: the same public names, signatures and exceptions. The hot path
(validation, dispatch, registry order, the memory tree) runs in a Rust core.

The project's README and its docs/ folder are the user guide: every envelope error code with an
example (docs/errors.md), the middleware rules, the memory tool, provider renderings and the
``agentkit-tools`` command line.
"""

from __future__ import annotations

from ._core import __version__
from .compose import as_tool
from .dispatch import DEFAULT_TIMEOUT_S, dispatch, render_result
from .errors import ToolArgumentError, ToolDefinitionError, ToolError, ToolShapeError, ToolTimeoutError
from .frozen import FrozenDict, FrozenList, deep_freeze
from . import middleware
from .context import ToolContext
from .invoker import Invoker
from .lint import lint
from .media import ToolFile, ToolImage
from .memory import FileTool, InMemoryFiles, MemoryLimitError, StoreConflictError, StoreFiles
from .registry import ToolRegistry
from .schema import Tool, ToolSchema
from .stores import FileStore, InMemoryStore, PostgresStore, RedisStore, StorePort
from .tools import OUTPUT_AUTO, FunctionTool, tool

__all__ = [
    "__version__",
    "DEFAULT_TIMEOUT_S",
    "FileStore",
    "FileTool",
    "FrozenDict",
    "FrozenList",
    "FunctionTool",
    "InMemoryFiles",
    "InMemoryStore",
    "Invoker",
    "MemoryLimitError",
    "OUTPUT_AUTO",
    "PostgresStore",
    "RedisStore",
    "StoreConflictError",
    "StoreFiles",
    "StorePort",
    "Tool",
    "ToolArgumentError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolFile",
    "ToolImage",
    "ToolRegistry",
    "ToolSchema",
    "ToolShapeError",
    "ToolTimeoutError",
    "as_tool",
    "deep_freeze",
    "dispatch",
    "lint",
    "middleware",
    "render_result",
    "tool",
]

"""agentkit-tools: turn Python functions into strictly validated tools for language models.

A drop-in for ``agentkit.tools``: the same public names, signatures and exceptions. The hot path
(validation, dispatch, registry order, the memory tree) runs in a Rust core.
"""

from __future__ import annotations

from ._core import __version__
from .dispatch import DEFAULT_TIMEOUT_S, dispatch, render_result
from .errors import ToolArgumentError, ToolDefinitionError, ToolError, ToolShapeError, ToolTimeoutError
from .frozen import FrozenDict, FrozenList, deep_freeze
from .registry import ToolRegistry
from .schema import Tool, ToolSchema
from .tools import OUTPUT_AUTO, FunctionTool, tool

__all__ = [
    "__version__",
    "DEFAULT_TIMEOUT_S",
    "FrozenDict",
    "FrozenList",
    "FunctionTool",
    "OUTPUT_AUTO",
    "Tool",
    "ToolArgumentError",
    "ToolDefinitionError",
    "ToolError",
    "ToolRegistry",
    "ToolSchema",
    "ToolShapeError",
    "ToolTimeoutError",
    "deep_freeze",
    "dispatch",
    "render_result",
    "tool",
]

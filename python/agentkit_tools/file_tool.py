"""The ``memory`` tool under the module name ``agentkit.tools`` uses (``agentkit.tools.file_tool``),
so ``from agentkit_tools.file_tool import TOOL_NAME, FileTool, InMemoryFiles`` keeps working.
Everything lives in :mod:`agentkit_tools.memory`."""

from .memory import TOOL_NAME, FileTool, InMemoryFiles

__all__ = ["TOOL_NAME", "FileTool", "InMemoryFiles"]

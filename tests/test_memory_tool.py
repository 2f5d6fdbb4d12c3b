"""The ``memory`` tool itself: its definition (name, schema, attributes), ``run`` with every
command and every argument mistake, the error classes, backends written to ``agentkit.tools``'
signatures, and a call through the dispatcher."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentkit_tools.errors import ToolError
from agentkit_tools.frozen import FrozenDict, FrozenList
from agentkit_tools.memory import (
    FileTool,
    InMemoryFiles,
    MemoryBackend,
    MemoryCommandError,
    MemoryExistsError,
    MemoryLimitError,
    MemoryNotFoundError,
    MemoryPermissionError,
    StoreConflictError,
    StoreFiles,
)
from agentkit_tools.schema import Tool, ToolSchema
from agentkit_tools.stores import InMemoryStore


def run(coro):
    return asyncio.run(coro)


def test_definition():
    t = FileTool()
    assert t.name == "memory"
    assert (t.side_effecting, t.idempotent, t.requires_approval) == (True, False, False)
    assert (t.caps, t.url_arg, t.timeout_s, t.max_result_chars, t.output_schema) == ((), None, None, None, None)
    assert isinstance(t, Tool)
    assert isinstance(t.backend, InMemoryFiles) and isinstance(t.backend, MemoryBackend)
    assert len(t.description.strip()) >= 30
    assert t.description.startswith("Your persistent memory: a directory of text files under /memories")
    assert isinstance(t.schema, ToolSchema)
    assert (t.schema.name, t.schema.description) == ("memory", t.description)
    p = t.schema.parameters
    assert list(p["properties"]) == [
        "command", "path", "file_text", "overwrite", "old_str", "new_str", "insert_line", "insert_text",
        "view_range", "old_path", "new_path",
    ]
    assert p["required"] == ["command"]
    assert p["additionalProperties"] is False
    assert list(p["properties"]["command"]["enum"]) == ["view", "create", "str_replace", "insert", "delete", "rename"]
    vr = p["properties"]["view_range"]
    assert (vr["type"], dict(vr["items"]), vr["minItems"], vr["maxItems"]) == ("array", {"type": "integer"}, 2, 2)
    assert (p["properties"]["insert_line"]["type"], p["properties"]["overwrite"]["type"]) == ("integer", "boolean")
    assert all(len(prop["description"]) > 10 for prop in p["properties"].values())


def test_schema_is_valid_json_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(json.dumps(FileTool().schema.parameters, default=list))
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    assert v.is_valid({"command": "view", "path": "/memories", "view_range": [1, 2]})
    assert not v.is_valid({"command": "move"})
    assert not v.is_valid({"path": "/memories"})
    assert not v.is_valid({"command": "view", "colour": 1})


def test_root_is_used_in_schema_and_must_match_the_backend():
    t = FileTool(root="/notes/")
    assert t.root == "/notes" and t.backend.root == "/notes"
    assert "under /notes" in t.description
    assert run(t.run({"command": "create", "path": "a", "file_text": "x"})) == "File created successfully at /notes/a (1 bytes)."
    with pytest.raises(ValueError) as info:
        FileTool(InMemoryFiles(root="/memories"), root="/notes")
    assert str(info.value) == "FileTool root '/notes' differs from the backend's root '/memories'; pass the same root= to both"


def test_run_every_command():
    t = FileTool()
    r = lambda **a: run(t.run(a, None))  # noqa: E731
    assert r(command="create", path="/memories/todo.md", file_text="- a\n- b\n") == (
        "File created successfully at /memories/todo.md (8 bytes)."
    )
    assert r(command="view", path="/memories") == "/memories/todo.md"
    # The model reads files with 1-based line numbers (the backend returns the plain text).
    assert r(command="view", path="/memories/todo.md") == "     1\t- a\n     2\t- b"
    assert run(t.backend.view("/memories/todo.md")) == "- a\n- b\n"
    assert r(command="view", path="/memories/todo.md", view_range=[2, 2]) == "     2\t- b"
    assert r(command="str_replace", path="/memories/todo.md", old_str="- a", new_str="- a (done)") == (
        "The file /memories/todo.md has been edited."
    )
    assert r(command="insert", path="/memories/todo.md", insert_line=2, insert_text="- c") == (
        "Text inserted after line 2 of /memories/todo.md."
    )
    assert r(command="view", path="/memories/todo.md") == "     1\t- a (done)\n     2\t- b\n     3\t- c"
    assert t.backend.files() == {"/memories/todo.md": "- a (done)\n- b\n- c\n"}
    assert r(command="rename", old_path="/memories/todo.md", new_path="/memories/done.md") == (
        "Renamed /memories/todo.md to /memories/done.md."
    )
    assert r(command="rename", path="/memories/done.md", new_path="/memories/archive/done.md") == (
        "Renamed /memories/done.md to /memories/archive/done.md."
    )
    assert r(command="delete", path="/memories/archive") == "Deleted directory /memories/archive (1 file(s))."
    assert r(command="view", path="/memories") == "The directory /memories is empty."
    assert r(command="create", path="/memories/e.md", file_text="") == "File created successfully at /memories/e.md (0 bytes)."
    assert r(command="view", path="/memories/e.md") == "The file /memories/e.md is empty."


def test_run_accepts_json_text_frozen_values_and_nulls():
    t = FileTool()
    assert run(t.run('{"command": "create", "path": "a", "file_text": "1\\n2\\n"}', None)).startswith("File created")
    args = FrozenDict({"command": "view", "path": "a", "view_range": FrozenList([2, 2]), "file_text": None})
    assert run(t.run(args, None)) == "     2\t2"
    with pytest.raises(MemoryCommandError) as info:
        run(t.run("{not json", None))
    assert info.value.code == "invalid_argument"
    assert str(info.value).startswith("memory tool arguments are not valid JSON (")
    with pytest.raises(MemoryCommandError) as info:
        run(t.run(["view"], None))
    assert str(info.value) == (
        'memory tool arguments must be a JSON object, got list; send e.g. {"command": "view", "path": "/memories"}'
    )


@pytest.mark.parametrize(
    "args, cls, code, message",
    [
        ({"command": "str_replace", "path": "f"}, MemoryCommandError, "missing_argument",
         'command "str_replace" is missing required argument(s) old_str, new_str; it takes path, old_str, new_str (required: path, old_str, new_str)'),
        ({"command": "str_replace", "path": "f", "old_str": "x"}, MemoryCommandError, "missing_argument",
         'command "str_replace" is missing required argument(s) new_str; it takes path, old_str, new_str (required: path, old_str, new_str)'),
        ({"command": "view", "path": "/"}, MemoryPermissionError, "permission_denied",
         'path "/" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)'),
        ({"command": "create", "path": "/memories/notes\n/memories/passwords.md", "file_text": "x"}, MemoryPermissionError,
         "permission_denied", 'path "/memories/notes\\n/memories/passwords.md" contains the control character U+000A; memory paths are plain names under /memories without line breaks, tabs or other control characters'),
        ({"command": "str_replace", "path": "f", "old_str": "x", "new_str": "y"}, MemoryCommandError, "ambiguous_match",
         "old_str occurs 2 times in /memories/f (at lines 1, 2); it must occur exactly once: add surrounding context to old_str so it matches only the place you mean"),
        ({"command": "view", "path": "nope"}, MemoryNotFoundError, "not_found",
         "no file or directory at /memories/nope; view /memories to list the existing files"),
        ({"command": "create", "path": "f", "file_text": "z"}, MemoryExistsError, "already_exists",
         "/memories/f already exists; pass overwrite=true to replace it, use str_replace or insert to edit it, or pick another path"),
        ({"command": "delete", "path": "../../etc"}, MemoryPermissionError, "permission_denied",
         'path "../../etc" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)'),
        # onto itself: never "already exists; delete it first", which would lose the file
        ({"command": "rename", "old_path": "f", "new_path": "/memories/./f"}, MemoryCommandError, "invalid_argument",
         "old_path and new_path are both /memories/f, so there is nothing to rename and nothing was changed; pass the new name as new_path"),
        ({"command": "insert", "path": "f", "insert_text": "t"}, MemoryCommandError, "missing_argument",
         'command "insert" is missing required argument(s) insert_line; it takes path, insert_line, insert_text (required: path, insert_line, insert_text)'),
    ],
)
def test_run_errors_are_tool_errors_with_codes(args, cls, code, message):
    t = FileTool()
    run(t.run({"command": "create", "path": "f", "file_text": "x\nx\n"}, None))
    with pytest.raises(cls) as info:
        run(t.run(args, None))
    e = info.value
    assert isinstance(e, ToolError)
    assert (e.code, str(e), e.message) == (code, message, message)
    assert t.backend.files() == {"/memories/f": "x\nx\n"}


def test_error_classes_keep_the_standard_bases():
    assert issubclass(MemoryPermissionError, PermissionError)
    assert issubclass(MemoryNotFoundError, FileNotFoundError)
    assert issubclass(MemoryExistsError, ValueError)
    assert issubclass(MemoryExistsError, FileExistsError)
    assert issubclass(MemoryCommandError, ValueError)
    assert issubclass(MemoryLimitError, ValueError)
    assert issubclass(StoreConflictError, RuntimeError)
    for cls in (MemoryPermissionError, MemoryNotFoundError, MemoryExistsError, MemoryCommandError,
                MemoryLimitError, StoreConflictError):
        assert issubclass(cls, ToolError)
    e = MemoryLimitError("m", limit="max_files", maximum=1, used=1, requested=2)
    assert (e.code, e.retriable, e.details) == (
        "memory_limit", False, {"limit": "max_files", "maximum": 1, "used": 1, "requested": 2}
    )
    assert StoreConflictError("m").retriable is True


def test_store_backed_tool():
    store = InMemoryStore()
    t = FileTool(StoreFiles(store, namespace="user-7"))
    assert run(t.run({"command": "create", "path": "a", "file_text": "x"}, None)) == (
        "File created successfully at /memories/a (1 bytes)."
    )
    assert json.loads(run(store.get("memory:user-7")))["files"] == {"/memories/a": "x"}


def test_through_the_dispatcher():
    from agentkit_tools import ToolRegistry, dispatch

    reg = ToolRegistry()
    reg.register(FileTool())
    ok = dispatch({"id": "1", "name": "memory", "input": {"command": "create", "path": "n.md", "file_text": "hi"}}, reg)
    assert (ok["ok"], ok["value"]) == (True, "File created successfully at /memories/n.md (2 bytes).")
    bad = dispatch({"id": "2", "name": "memory", "input": {"command": "create", "path": "n.md", "file_text": "x"}}, reg)
    assert bad["ok"] is False
    assert bad["error"]["code"] == "already_exists"
    assert bad["error"]["message"] == (
        "/memories/n.md already exists; pass overwrite=true to replace it, use str_replace or insert to edit it, "
        "or pick another path"
    )
    esc = dispatch({"id": "3", "name": "memory", "input": {"command": "view", "path": "/etc"}}, reg)
    assert (esc["ok"], esc["error"]["code"]) == (False, "permission_denied")
    unknown = dispatch({"id": "4", "name": "memory", "input": {"command": "view", "colour": "red"}}, reg)
    assert (unknown["ok"], unknown["error"]["code"]) == (False, "invalid_arguments")


def test_tool_name_is_exported_where_agentkit_tools_has_it():
    from agentkit_tools.file_tool import TOOL_NAME, FileTool as FT, InMemoryFiles as IMF
    from agentkit_tools.memory import TOOL_NAME as T2

    assert (TOOL_NAME, T2, FT, IMF) == ("memory", "memory", FileTool, InMemoryFiles)
    assert FileTool().name == FileTool().schema.name == TOOL_NAME


def test_create_over_an_existing_file_raises_file_exists_error():
    t = FileTool()
    run(t.run({"command": "create", "path": "/memories/note.md", "file_text": "original"}))
    with pytest.raises(FileExistsError) as info:
        run(t.run({"command": "create", "path": "/memories/note.md", "file_text": "replacement"}))
    assert isinstance(info.value, MemoryExistsError) and isinstance(info.value, ValueError)
    assert info.value.code == "already_exists"
    with pytest.raises(FileExistsError):
        run(t.backend.create("/memories/note.md", "z"))
    assert t.backend.files() == {"/memories/note.md": "original"}


def test_in_memory_files_takes_root_positionally():
    f = InMemoryFiles("/notes")
    assert f.root == "/notes"
    run(f.create("/notes/a", "x"))
    assert run(f.view("/")) == "/notes/a"  # "/" lists everything, as agentkit's runtime asks
    assert run(StoreFiles(InMemoryStore(), namespace="n").view("/")) == ""


class ReferenceStyleFiles:
    """A backend written to agentkit.tools' signatures: view(path), rename(path, new_path),
    str_replace without a default, create with keyword-only overwrite."""

    def __init__(self):
        self.files: dict[str, str] = {}
        self.calls: list[tuple] = []

    async def view(self, path):
        self.calls.append(("view", path))
        return self.files.get(path, "\n".join(sorted(self.files)))

    async def create(self, path, file_text, *, overwrite=False):
        self.calls.append(("create", path, file_text, overwrite))
        self.files[path] = file_text
        return f"created {path}"

    async def str_replace(self, path, old_str, new_str):
        self.calls.append(("str_replace", path, old_str, new_str))
        self.files[path] = self.files[path].replace(old_str, new_str, 1)
        return f"edited {path}"

    async def insert(self, path, insert_line, insert_text):
        self.calls.append(("insert", path, insert_line, insert_text))
        return f"inserted into {path}"

    async def delete(self, path):
        self.calls.append(("delete", path))
        return f"deleted {path}"

    async def rename(self, path, new_path):
        self.calls.append(("rename", path, new_path))
        self.files[new_path] = self.files.pop(path)
        return f"renamed {path} -> {new_path}"


def test_backend_with_the_reference_signatures_is_called_as_the_reference_does():
    b = ReferenceStyleFiles()
    t = FileTool(b)
    r = lambda **a: run(t.run(a))  # noqa: E731
    assert r(command="create", path="n.md", file_text="a\nb") == "created /memories/n.md"
    assert r(command="view", path="/memories/n.md") == "a\nb"  # a foreign backend's text, as given
    assert r(command="str_replace", path="n.md", old_str="a", new_str="A") == "edited /memories/n.md"
    assert r(command="insert", path="n.md", insert_line=1, insert_text="x") == "inserted into /memories/n.md"
    assert r(command="rename", path="n.md", new_path="m/../o.md") == "renamed /memories/n.md -> /memories/o.md"
    assert r(command="delete", path="/memories/o.md/") == "deleted /memories/o.md"
    assert b.calls == [
        ("create", "/memories/n.md", "a\nb", False),
        ("view", "/memories/n.md"),
        ("str_replace", "/memories/n.md", "a", "A"),
        ("insert", "/memories/n.md", 1, "x"),
        ("rename", "/memories/n.md", "/memories/o.md"),
        ("delete", "/memories/o.md"),
    ]
    # Paths are confined before a foreign backend sees them.
    for bad in ("/etc/passwd", "../x", "/", "a\x00b", "a\nb"):
        with pytest.raises(PermissionError):
            r(command="view", path=bad)
    assert len(b.calls) == 6


def test_is_read_only_call_is_true_for_view_only():
    t = FileTool()
    assert t.is_read_only_call({"command": "view", "path": "/memories"}) is True
    assert t.is_read_only_call(FrozenDict({"command": "view", "path": "/memories", "view_range": [1, 2]})) is True
    for command in ("create", "str_replace", "insert", "delete", "rename"):
        assert t.is_read_only_call({"command": command, "path": "/memories/a"}) is False
    assert t.is_read_only_call({}) is False
    assert t.side_effecting is True  # the tool as a whole stays side-effecting


@pytest.mark.parametrize("backend", [InMemoryFiles(), StoreFiles(InMemoryStore(), namespace="many")], ids=["in_memory", "store"])
def test_a_needle_that_matches_everywhere_is_answered_within_the_deadline(backend):
    # Counting restarted a search after each match: 80,000 matches ran past the 10 s deadline
    # (timeout envelope) and 10,000 made a 30 KB message of line numbers.
    from agentkit_tools import ToolRegistry, dispatch

    reg = ToolRegistry()
    reg.register(FileTool(backend))
    call = lambda **a: dispatch({"id": "1", "name": "memory", "input": a}, reg)  # noqa: E731
    assert call(command="create", path="e", file_text="e" * 40_000 + "\n" + "e" * 40_000)["ok"] is True
    env = call(command="str_replace", path="e", old_str="e", new_str="x")
    assert env["error"]["code"] == "ambiguous_match"
    assert env["error"]["message"] == (
        "old_str occurs 80000 times in /memories/e (at lines 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 and 79990 more); it must "
        "occur exactly once: add surrounding context to old_str so it matches only the place you mean"
    )

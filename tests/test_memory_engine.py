"""The memory command engine of the Rust core, seen from Python through InMemoryFiles and the
``_core`` binding (SPEC §10, §11 "Memory"): path confinement, every command, every error,
argument checks, and properties over random inputs."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit_tools import _core
from agentkit_tools.errors import ToolError
from agentkit_tools.memory import (
    InMemoryFiles,
    MemoryCommandError,
    MemoryExistsError,
    MemoryLimitError,
    MemoryNotFoundError,
    MemoryPermissionError,
)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def files():
    return InMemoryFiles()


# ------------------------------------------------------------------ paths


@pytest.mark.parametrize(
    "path, stored",
    [
        ("/memories/a.md", "/memories/a.md"),
        ("a.md", "/memories/a.md"),
        ("./x/y.md", "/memories/x/y.md"),
        ("/memories/a/../b.md", "/memories/b.md"),
        ("/memories//c///d.md", "/memories/c/d.md"),
        ("/memories/../memories/e.md", "/memories/e.md"),
        ("x/./../f.md", "/memories/f.md"),
    ],
)
def test_paths_normalise_under_the_root(files, path, stored):
    assert run(files.create(path, "t")) == f"File created successfully at {stored} (1 bytes)."
    assert files.files() == {stored: "t"}


@pytest.mark.parametrize(
    "path, message",
    [
        ("/etc/passwd", 'path "/etc/passwd" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)'),
        ("../secrets", 'path "../secrets" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)'),
        ("/memories/../../x", 'path "/memories/../../x" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)'),
        ("/memoriesX/a", 'path "/memoriesX/a" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)'),
        ("C:\\memories\\a", 'path "C:\\\\memories\\\\a" contains a backslash; memory paths are POSIX paths separated by / under /memories'),
        ("a\x00.md", 'path "a\\0.md" contains a NUL byte; use a plain path under /memories'),
    ],
)
def test_escapes_are_permission_errors(files, path, message):
    with pytest.raises(PermissionError) as info:
        run(files.create(path, "t"))
    assert str(info.value) == message
    assert isinstance(info.value, MemoryPermissionError) and isinstance(info.value, ToolError)
    assert info.value.code == "permission_denied"
    assert files.files() == {}


def test_custom_root():
    f = InMemoryFiles(root="/notes/")
    assert f.root == "/notes"
    assert run(f.create("a", "x")) == "File created successfully at /notes/a (1 bytes)."
    with pytest.raises(PermissionError):
        run(f.view("/memories"))
    with pytest.raises(ValueError, match=r"memory root \"/\" is not usable: it must be a directory below /"):
        InMemoryFiles(root="/")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["a", "/", ".", "..", "\\", "\x00", "memories", "é", " "]), max_size=12).map("".join))
def test_no_path_ever_lands_outside_the_root(path):
    f = InMemoryFiles()
    try:
        run(f.create(path, "x"))
    except (PermissionError, ValueError):
        assert f.files() == {}
        return
    (stored,) = f.files()
    assert stored.startswith("/memories/")
    segments = stored.split("/")[1:]
    assert all(s not in ("", ".", "..") for s in segments)
    assert "\\" not in stored and "\x00" not in stored


# ------------------------------------------------------------------ commands


def test_view(files):
    run(files.create("/memories/b.md", "one\ntwo\nthree"))
    run(files.create("/memories/a/z.md", "z"))
    assert run(files.view("/memories")) == "/memories/a/z.md\n/memories/b.md"
    assert run(files.view("/memories/a")) == "/memories/a/z.md"
    assert run(files.view("/memories/b.md")) == "one\ntwo\nthree"
    assert run(files.view("/memories/b.md", [2, 3])) == "two\nthree"
    assert run(files.view("/memories/b.md", (3, -1))) == "three"
    with pytest.raises(MemoryCommandError) as info:
        run(files.view("/memories/b.md", [2, 4]))
    assert info.value.code == "out_of_range"
    assert str(info.value) == (
        "view_range [2, 4] is out of range for /memories/b.md, which has 3 line(s); pass [start, end] with "
        "1 <= start <= end <= 3 (end may be -1 for the last line), or omit view_range to read the whole file"
    )
    with pytest.raises(MemoryNotFoundError) as info:
        run(files.view("/memories/nope"))
    assert isinstance(info.value, FileNotFoundError)
    assert str(info.value) == "no file or directory at /memories/nope; view /memories to list the existing files"


def test_create_and_overwrite(files):
    assert run(files.create("n.md", "héllo")) == "File created successfully at /memories/n.md (6 bytes)."
    with pytest.raises(MemoryExistsError) as info:
        run(files.create("n.md", "x"))
    assert isinstance(info.value, ValueError)
    assert (info.value.code, str(info.value)) == (
        "already_exists",
        "/memories/n.md already exists; pass overwrite=true to replace it, use str_replace or insert to edit it, "
        "or pick another path",
    )
    assert run(files.create("n.md", "x", overwrite=True)) == "File /memories/n.md overwritten (1 bytes)."
    assert files.files() == {"/memories/n.md": "x"}
    with pytest.raises(MemoryCommandError, match="is a file, so /memories/n.md/sub cannot be created"):
        run(files.create("n.md/sub", "x"))
    with pytest.raises(MemoryCommandError, match="is the memory root directory"):
        run(files.create("/memories", "x"))


def test_str_replace(files):
    run(files.create("f", "a = 1\nb = 1\n"))
    assert run(files.str_replace("f", "a = 1", "a = 2")) == "The file /memories/f has been edited."
    assert files.files() == {"/memories/f": "a = 2\nb = 1\n"}
    with pytest.raises(MemoryCommandError) as info:
        run(files.str_replace("f", " = ", ":"))
    assert (info.value.code, str(info.value)) == (
        "ambiguous_match",
        "old_str occurs 2 times in /memories/f (at lines 1, 2); it must occur exactly once: add surrounding "
        "context to old_str so it matches only the place you mean",
    )
    with pytest.raises(MemoryCommandError) as info:
        run(files.str_replace("f", "c = 1", "c = 2"))
    assert info.value.code == "no_match"
    assert run(files.str_replace("f", "b = 1\n", "")) == "The file /memories/f has been edited."
    assert files.files() == {"/memories/f": "a = 2\n"}


def test_insert(files):
    run(files.create("f", "a\nb"))
    assert run(files.insert("f", 0, "top")) == "Text inserted after line 0 of /memories/f."
    # After the last line, as agentkit.tools does it: the inserted text's line break is dropped.
    assert run(files.insert("f", 3, "end\n")) == "Text inserted after line 3 of /memories/f."
    assert files.files() == {"/memories/f": "top\na\nb\nend"}
    with pytest.raises(MemoryCommandError) as info:
        run(files.insert("f", 5, "x"))
    assert str(info.value) == (
        "insert_line 5 is out of range for /memories/f, which has 4 line(s) counting an empty last line after "
        "a final line break; pass 0 to insert at the top or a value from 1 to 4 to insert after that line"
    )
    # A file that ends with a line break keeps it.
    run(files.create("g", "a\nb\n"))
    run(files.insert("g", 2, "end\n"))
    assert files.files()["/memories/g"] == "a\nb\nend\n"


def test_delete_and_rename(files):
    run(files.create("d/a", "1"))
    run(files.create("d/b", "2"))
    run(files.create("c", "3"))
    assert run(files.rename("d", "e/d2")) == "Renamed directory /memories/d to /memories/e/d2 (2 file(s))."
    with pytest.raises(ValueError) as info:
        run(files.rename("c", "e/d2/a"))
    assert str(info.value) == (
        "cannot rename /memories/c to /memories/e/d2/a: /memories/e/d2/a already exists; delete it first or "
        "choose another new_path"
    )
    with pytest.raises(PermissionError, match="refusing to delete the memory root /memories"):
        run(files.delete("/memories/"))
    assert run(files.delete("e")) == "Deleted directory /memories/e (2 file(s))."
    assert files.files() == {"/memories/c": "3"}


def test_limits(files):
    f = InMemoryFiles(max_bytes=16, max_files=1)  # "/memories/a" is 11 bytes: paths count
    run(f.create("a", "12345"))
    with pytest.raises(MemoryLimitError) as info:
        run(f.insert("a", 0, ""))
    assert (info.value.limit, info.value.maximum, info.value.used, info.value.requested) == ("max_bytes", 16, 16, 17)
    g = InMemoryFiles(max_files=1)
    run(g.create("a", "12345"))
    with pytest.raises(MemoryLimitError) as info:
        run(g.create("b", ""))
    assert (info.value.limit, info.value.maximum, info.value.used, info.value.requested) == ("max_files", 1, 1, 2)
    assert f.files() == g.files() == {"/memories/a": "12345"}


def test_path_names_count_toward_max_bytes_and_are_capped():
    f = InMemoryFiles(max_bytes=100)
    long = "/memories/" + "n" * 80
    run(f.create(long, ""))
    with pytest.raises(MemoryLimitError) as info:
        run(f.create(long + "2", ""))
    assert (info.value.used, info.value.requested) == (90, 181)
    g = InMemoryFiles()
    with pytest.raises(MemoryCommandError) as info:
        run(g.create("/memories/" + "x" * 1015, ""))
    assert (info.value.code, str(info.value)) == (
        "path_too_long",
        "path is 1025 bytes long; a memory path may be at most 1024 bytes (UTF-8, root included): choose a "
        "shorter name",
    )
    run(g.create("/memories/" + "x" * 1014, ""))


def test_control_characters_in_paths_are_refused():
    f = InMemoryFiles()
    with pytest.raises(MemoryPermissionError) as info:
        run(f.create("/memories/notes\n/memories/passwords.md", "x"))
    assert info.value.code == "permission_denied"
    assert str(info.value) == (
        "path \"/memories/notes\\n/memories/passwords.md\" contains the control character U+000A; memory paths "
        "are plain names under /memories without line breaks, tabs or other control characters"
    )
    for bad in ("a\tb", "a\rb", "a\x1b[31m", "a\x7f", "a\x85"):
        with pytest.raises(PermissionError):
            run(f.create(bad, "x"))
    assert f.files() == {}
    assert run(f.view("/memories")) == ""


def test_tree_document_and_counters():
    tree = _core.MemoryTree("/memories", max_bytes=100, max_files=10)
    assert tree.apply("create", {"path": "a", "file_text": "ü"}) == "File created successfully at /memories/a (2 bytes)."
    assert (tree.bytes, tree.file_count, tree.root) == (2 + 11, 1, "/memories")
    assert tree.to_json() == '{"format":"agentkit-memory-tree","version":1,"root":"/memories","files":{"/memories/a":"ü"}}'
    with pytest.raises(MemoryCommandError, match="unexpected argument\\(s\\) colour"):
        tree.apply("view", {"path": "a", "colour": "red"})
    with pytest.raises(MemoryCommandError, match='unknown command "move"'):
        tree.apply("move", {"path": "a"})


# ------------------------------------------------------------------ argument checks


def test_parse_call_returns_the_backend_method_and_resolved_positional_args():
    assert _core.memory_parse_call({"command": "view", "path": "/memories/"}) == ("view", ("/memories", None))
    assert _core.memory_parse_call({"command": "view", "path": "a", "view_range": [1, -1]}) == (
        "view",
        ("/memories/a", (1, -1)),
    )
    assert _core.memory_parse_call({"command": "rename", "path": "a", "new_path": "b/../c"}) == (
        "rename",
        ("/memories/a", "/memories/c"),
    )
    assert _core.memory_parse_call({"command": "delete", "path": "x"}, "/notes") == ("delete", ("/notes/x",))
    with pytest.raises(MemoryPermissionError):
        _core.memory_parse_call({"command": "view", "path": "/"})
    with pytest.raises(MemoryPermissionError):
        _core.memory_parse_call({"command": "rename", "path": "a", "new_path": "/etc/x"})
    # JSON nulls count as absent (strict-mode renderings send every key).
    full = {k: None for k in ["path", "file_text", "overwrite", "old_str", "new_str", "insert_line",
                              "insert_text", "view_range", "old_path", "new_path"]}
    assert _core.memory_parse_call({**full, "command": "create", "path": "x", "file_text": "t"}) == (
        "create",
        ("/memories/x", "t", False),
    )
    assert _core.memory_parse_call({"command": "insert", "path": "x", "insert_line": 2, "insert_text": "t"}) == (
        "insert",
        ("/memories/x", 2, "t"),
    )
    assert _core.memory_parse_call({"command": "str_replace", "path": "x", "old_str": "a", "new_str": ""}) == (
        "str_replace",
        ("/memories/x", "a", ""),
    )


@pytest.mark.parametrize(
    "args, code, message",
    [
        ({}, "missing_argument", "missing required argument command; pass one of view, create, str_replace, insert, delete, rename"),
        ({"command": "create", "path": "x"}, "missing_argument",
         'command "create" is missing required argument(s) file_text; it takes path, file_text, overwrite (required: path, file_text)'),
        ({"command": "str_replace", "path": "x", "old_str": "a"}, "missing_argument",
         'command "str_replace" is missing required argument(s) new_str; it takes path, old_str, new_str (required: path, old_str, new_str)'),
        ({"command": "view", "path": "x", "old_str": "a"}, "unexpected_argument",
         'command "view" does not take old_str; it takes path, view_range. Remove the others and call again'),
        ({"command": "insert", "path": "x", "insert_line": "3", "insert_text": "t"}, "invalid_argument",
         "insert_line must be an integer, got str; send insert_line as an integer and call again"),
        ({"command": "insert", "path": "x", "insert_line": True, "insert_text": "t"}, "invalid_argument",
         "insert_line must be an integer, got bool; send insert_line as an integer and call again"),
        ({"command": "create", "path": "x", "file_text": "t", "overwrite": "yes"}, "invalid_argument",
         "overwrite must be a boolean (true or false), got str; send overwrite as a boolean (true or false) and call again"),
        ({"command": "view", "path": "x", "view_range": [1]}, "invalid_argument",
         "view_range must be an array of two integers [start, end], got list; send view_range as an array of two integers [start, end] and call again"),
        ({"command": "view", "path": 5}, "invalid_argument",
         "path must be a string, got int; send path as a string and call again"),
    ],
)
def test_parse_call_errors(args, code, message):
    with pytest.raises(MemoryCommandError) as info:
        _core.memory_parse_call(args)
    assert (info.value.code, str(info.value)) == (code, message)


# ------------------------------------------------------------------ properties


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.sampled_from(["a", "b", "d/c"]), st.text(max_size=6), st.booleans()),
        st.tuples(st.just("str_replace"), st.sampled_from(["a", "b", "d/c"]), st.text(min_size=0, max_size=2), st.text(max_size=3)),
        st.tuples(st.just("insert"), st.sampled_from(["a", "b", "d/c"]), st.integers(-1, 4), st.text(max_size=3)),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b", "d", "d/c", "/memories"])),
        st.tuples(st.just("rename"), st.sampled_from(["a", "b", "d"]), st.sampled_from(["a", "b", "e", "d/x"])),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_failed_commands_change_nothing_and_byte_counts_stay_exact(ops):
    tree = _core.MemoryTree("/memories", max_bytes=40, max_files=3)
    for op in ops:
        before = tree.files()
        kwargs = {
            "create": lambda o: dict(path=o[1], file_text=o[2], overwrite=o[3]),
            "str_replace": lambda o: dict(path=o[1], old_str=o[2], new_str=o[3]),
            "insert": lambda o: dict(path=o[1], insert_line=o[2], insert_text=o[3]),
            "delete": lambda o: dict(path=o[1]),
            "rename": lambda o: dict(old_path=o[1], new_path=o[2]),
        }[op[0]](op)
        try:
            tree.apply(op[0], kwargs)
        except (ValueError, PermissionError, FileNotFoundError):
            assert tree.files() == before
        after = tree.files()
        size = lambda files: sum(len(p.encode()) + len(t.encode()) for p, t in files.items())  # noqa: E731
        assert tree.bytes == size(after)
        assert tree.file_count == len(after)
        assert tree.bytes <= 40 or tree.bytes <= size(before)
        assert tree.file_count <= 3

"""``agentkit_tools.lint`` (SPEC §2, §3, §9) and the ``schema`` CLI subcommand (SPEC §9)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import pytest

from agentkit_tools import FunctionTool, ToolRegistry, ToolSchema, lint, tool
from agentkit_tools.__main__ import main as cli_main


def schema_main(argv: list[str]) -> int:
    return cli_main(["schema", *argv])
from agentkit_tools.lint import CODES, LintFinding


class Opaque:
    pass


_SENTINEL = object()


@tool(side_effecting=False)
def messy(query: str, limit: int = 5, blob: Opaque | None = None, marker: Any = _SENTINEL, tags: dict[str, int] | None = None) -> list[str]:
    """Search the catalogue for items matching a query string.

    Args:
        query: The text to look for.
        limt: Misspelled: documents nothing.
    """
    return []


@tool(side_effecting=False)
def clean(query: Annotated[str, "The text to look for."], limit: Annotated[int, "At most this many results."] = 5) -> list[str]:
    """Search the catalogue for items matching a query string."""
    return []


MESSY = [
    LintFinding("messy", "documented_not_parameter", "limt", "the docstring documents 'limt', which is not a parameter the model sees; rename or remove the entry"),
    LintFinding("messy", "undocumented_parameter", "limit", "parameter 'limit' has no description; document it in the docstring (Args:) or with Annotated[T, \"...\"]"),
    LintFinding("messy", "undocumented_parameter", "blob", "parameter 'blob' has no description; document it in the docstring (Args:) or with Annotated[T, \"...\"]"),
    LintFinding("messy", "undocumented_parameter", "marker", "parameter 'marker' has no description; document it in the docstring (Args:) or with Annotated[T, \"...\"]"),
    LintFinding("messy", "undocumented_parameter", "tags", "parameter 'tags' has no description; document it in the docstring (Args:) or with Annotated[T, \"...\"]"),
    LintFinding(
        "messy",
        "unresolved_hint",
        "blob",
        f"no JSON Schema for the type {Opaque!r}; annotate with a JSON type or a structured class; the parameter accepts any value: "
        "import the type where the function is defined or annotate with a JSON-expressible type",
    ),
    LintFinding("messy", "non_json_default", "marker", "the default of 'marker' is not JSON, so the model is not told it; use a JSON value (or None) as the default"),
]
NOT_STRICT = (
    "cannot be made strict (a value of any type has no strict form); the tool is rendered with strict: false and its plain schema"
)
NOT_STRICT_DICT = (
    "cannot be made strict (an object with arbitrary keys (dict[str, V]) cannot be closed: strict mode requires every key to be "
    "listed); the tool is rendered with strict: false and its plain schema"
)
GEMINI_DICT = (
    "an object without listed properties (dict[str, V], dict) is shown without a type and described in words (Gemini "
    "requires OBJECT schemas to list properties); keys and values are checked at call time"
)


def test_lint_reports_every_kind_of_finding_in_order() -> None:
    found = lint(messy)
    assert found[: len(MESSY)] == MESSY
    assert found[len(MESSY):] == [
        LintFinding("messy", "weakened_rendering", f"{p}:{path}", msg)
        for p in ("openai-strict", "openai-responses-strict")
        for path, msg in (
            ("properties.blob", NOT_STRICT),
            ("properties.marker", NOT_STRICT),
            ("properties.tags.anyOf[0]", NOT_STRICT_DICT),
        )
    ] + [LintFinding("messy", "weakened_rendering", "gemini:properties.tags.anyOf[0]", GEMINI_DICT)]
    assert {f.code for f in found} <= set(CODES)
    assert str(found[0]) == (
        "messy [limt]: documented_not_parameter: the docstring documents 'limt', which is not a parameter the model sees; "
        "rename or remove the entry"
    )


def test_a_clean_tool_has_no_findings() -> None:
    assert lint(clean) == []


def test_hand_built_tool_with_a_short_description() -> None:
    t = FunctionTool(
        name="short",
        fn=lambda args, ctx: None,
        description="Too short.",
        side_effecting=False,
        schema=ToolSchema("short", "Too short.", {"type": "object", "properties": {"x": {"type": "string", "description": "An x."}}}),
    )
    assert lint(t) == [
        LintFinding(
            "short",
            "short_description",
            "",
            "the description has 10 characters (floor 30): say what the tool does and when to use it",
        )
    ] + [
        LintFinding(
            "short",
            "weakened_rendering",
            f"{p}:<root>",
            "the input schema is open (**kwargs, or additionalProperties not false); strict mode closes it, so only "
            "the listed arguments can be sent",
        )
        for p in ("openai-strict", "openai-responses-strict")
    ]


def test_registry_lint_is_sorted_by_tool_name_and_never_raises() -> None:
    class Broken:
        name = "broken"
        description = "A tool whose schema property breaks lint on purpose."
        side_effecting = False
        requires_approval = False
        output_schema = None

        @property
        def schema(self) -> Any:
            raise RuntimeError("boom")

        async def run(self, args: Any, ctx: Any) -> Any:
            return None

    found = lint([clean, Broken()])
    assert found == [LintFinding("broken", "lint_error", "", "RuntimeError: boom")]
    reg = ToolRegistry([messy, clean])
    assert lint(reg) == lint(clean) + lint(messy)


def test_lint_of_a_non_tool_is_a_finding_not_an_exception() -> None:
    found = lint(42)
    assert found == [LintFinding("42", "lint_error", "", "TypeError: 'int' object is not iterable")]


# ---------------------------------------------------------------------------------------------
# python -m agentkit_tools schema MODULE:OBJ


@pytest.fixture
def cli_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "cli_tools_mod.py").write_text(
        textwrap.dedent(
            '''
            from agentkit_tools import ToolRegistry, tool


            def lookup(sku: str) -> int:
                """Report how many units of one SKU are in stock today."""
                return 0


            @tool(side_effecting=True)
            def reserve(sku: str, qty: int = 1) -> str:
                """Reserve units of one SKU for an order being packed."""
                return "ok"


            registry = ToolRegistry([reserve, lookup])


            class Shop:
                def lookup(self, sku: str) -> int:
                    """Report how many units of one SKU are in stock today."""
                    return 0

                def tally(self, counts: dict[str, int]) -> int:
                    """Add up the counts per SKU and return the total."""
                    return 0

                def _private(self) -> None:
                    pass


            shop = Shop()
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "cli_tools_mod"
    sys.modules.pop("cli_tools_mod", None)


LOOKUP_ANTHROPIC = {
    "name": "lookup",
    "description": "Report how many units of one SKU are in stock today.",
    "input_schema": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"], "additionalProperties": False},
}


def test_cli_function(cli_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert schema_main([f"{cli_module}:lookup"]) == 0
    out = capsys.readouterr()
    assert out.out == json.dumps(LOOKUP_ANTHROPIC, indent=2) + "\n"
    assert out.err == ""


def test_cli_registry_mcp(cli_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert schema_main([f"{cli_module}:registry", "--format", "mcp"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {
            "name": "lookup",
            "description": "Report how many units of one SKU are in stock today.",
            "inputSchema": LOOKUP_ANTHROPIC["input_schema"],
            # a plain function nobody classified: no read-only or destructive hint
            "annotations": {"idempotentHint": False},
        },
        {
            "name": "reserve",
            "description": "Reserve units of one SKU for an order being packed.",
            "inputSchema": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}},
                "required": ["sku"],
                "additionalProperties": False,
            },
            "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
        },
    ]


def test_cli_instance_methods_strict_with_warning(cli_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert schema_main([f"{cli_module}:shop", "--format", "openai-strict"]) == 0
    out = capsys.readouterr()
    rendered = json.loads(out.out)
    assert [(e["function"]["name"], e["function"]["strict"]) for e in rendered] == [("lookup", True), ("tally", False)]
    assert out.err == f"warning: tally [properties.counts]: {NOT_STRICT_DICT}\n"


def test_cli_tool_gemini(cli_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert schema_main([f"{cli_module}:reserve", "--format", "gemini"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "name": "reserve",
        "description": "Reserve units of one SKU for an order being packed.",
        "parameters": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}},
            "required": ["sku"],
        },
    }


def test_method_decorated_in_its_class_body_is_reported() -> None:
    class Kit:
        @tool(side_effecting=False)
        def search(self, q: Annotated[str, "What to look for."]) -> list[str]:
            """Search the kit for items whose name contains the text."""
            return []

        @tool(side_effecting=False)
        @classmethod
        def make(cls, q: Annotated[str, "What to build."]) -> str:
            """Build a query object from the text the model sends."""
            return q

    assert lint(Kit.search) == [
        LintFinding(
            "search",
            "unbound_method",
            "self",
            "'self' is skipped but nothing binds it, so calls will fail: register the tool through an "
            "instance (instance.method) or build it with tool(instance.method, ...)",
        )
    ]
    assert [(f.code, f.subject) for f in lint(Kit.__dict__["make"])] == [("unbound_method", "cls")]
    # Reached through an instance (or the class, for cls), the tool binds and is clean.
    assert lint(Kit().search) == [] and lint(Kit.make) == []
    # made without a declaration of its effects: reported
    assert [f.code for f in lint(FunctionTool.from_callable(Kit.search.func.__get__(Kit())))] == ["undeclared_effects"]
    assert lint(FunctionTool.from_callable(Kit.search.func.__get__(Kit()), side_effecting=False)) == []

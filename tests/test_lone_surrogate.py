"""A lone surrogate in a call's arguments (half of a UTF-16 pair: no character) is refused the
same way whether JSON text escapes it (`"\\ud800"`, which Python's json reads but this reader
refuses), JSON text holds it, or a mapping's string holds it, with words that say what to send
instead. JSON text was answered 'unexpected end of hex escape at line 1 column 14', a mapping
'UnicodeEncodeError: ... surrogates not allowed'."""

from __future__ import annotations

from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolRegistry, dispatch, tool

bodies: list[str] = []


@tool(read_only=True)
def echo(s: str) -> str:
    """Echo the text given back to the caller unchanged, for the lone surrogate tests.

    Args:
        s: Any text.
    """
    bodies.append(s)
    return s


FORMS: dict[str, Any] = {
    "escaped in JSON text": '{"s": "\\ud800"}',
    "escaped among other text": '{"s": "a\\ud800b"}',
    "followed by no low half": '{"s": "\\ud800\\u0041"}',
    "held by JSON text": '{"s": "\ud800"}',
    "JSON text Python's json reads": '{"s": "\\ud800", "n": 18446744073709551616}',
    "held by a mapping": {"s": "\ud800"},
}


async def answer(path: str, args: Any) -> dict[str, Any]:
    call = {"id": "c1", "name": "echo", "input": args}
    reg = ToolRegistry([echo])
    if path == "invoke":
        return await Invoker(reg).invoke(call, ToolContext())
    if path == "invoke_many":
        [env] = await Invoker(reg).invoke_many([call], ToolContext())
        return env
    return dispatch(call, reg)


WHY = (
    "the arguments are not valid JSON (a string holds the lone surrogate \\ud800, half of a UTF-16 pair and no "
    "character: send the character itself, or both halves of its pair)"
)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("path", ["invoke", "invoke_many", "dispatch"])
async def test_a_lone_surrogate_is_refused_alike_with_what_to_send(path: str, form: str) -> None:
    bodies.clear()
    env = await answer(path, FORMS[form])
    assert env == {
        "ok": False,
        "error": {
            "code": "invalid_arguments",
            "message": f"tool 'echo' call rejected: {WHY}. Accepted arguments: ['s']. Re-read the input schema and "
            "call 'echo' again with corrected arguments.",
            "errors": [{"path": "<arguments>", "reason": WHY}],
            "schema": {
                "type": "object",
                "properties": {"s": {"type": "string", "description": "Any text."}},
                "required": ["s"],
                "additionalProperties": False,
            },
        },
    }
    assert bodies == []


@pytest.mark.parametrize("path", ["invoke", "invoke_many", "dispatch"])
async def test_a_pair_and_an_escaped_backslash_are_text(path: str) -> None:
    bodies.clear()
    assert (await answer(path, '{"s": "\\ud83d\\ude00"}'))["value"] == "\U0001f600"
    assert (await answer(path, '{"s": "\\\\ud800"}'))["value"] == "\\ud800"
    assert bodies == ["\U0001f600", "\\ud800"]


async def test_another_fault_beside_a_lone_surrogate_keeps_the_parsers_words() -> None:
    env = dispatch({"id": "c1", "name": "echo", "input": '{"s": "\\ud800", "t": [}'}, ToolRegistry([echo]))
    why = "the arguments are not valid JSON (unexpected end of hex escape at line 1 column 14)"
    assert env["error"]["errors"] == [{"path": "<arguments>", "reason": why}]

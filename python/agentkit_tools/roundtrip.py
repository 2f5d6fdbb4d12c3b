"""Provider round-trips: take a model response that asks for tool calls, run every
call through an :class:`~agentkit_tools.Invoker` (concurrently, call order kept), and return the
provider's tool-result message(s) to send on the next turn.

- Anthropic Messages: the ``content`` blocks of ``type: "tool_use"`` (``id``, ``name``,
  ``input``) → one ``{"role": "user", "content": [{"type": "tool_result", ...}, ...]}`` message
  (None when there is no call): :func:`anthropic_tool_results`.
- OpenAI Chat Completions: ``choices[0].message.tool_calls`` (``id``, ``function.name``,
  ``function.arguments``) → ``[{"role": "tool", "tool_call_id", "content"}, ...]``:
  :func:`openai_chat_tool_results`.
- OpenAI Responses: the ``output`` items of ``type: "function_call"`` (``call_id``, ``name``,
  ``arguments``) → ``[{"type": "function_call_output", "call_id", "output"}, ...]``:
  :func:`openai_responses_tool_results`.

A result holding images or files (``agentkit_tools.media``: ``ToolImage``, ``ToolFile``, or a
list mixing them with text) is carried natively: Anthropic ``tool_result`` content blocks
(``text``, ``image``, ``document``), an OpenAI Responses ``output`` list (``input_text``,
``input_image``, ``input_file``), and for OpenAI Chat, whose ``tool`` messages take text only,
one ``role: "user"`` message after the tool messages holding the images and files (the tool
text says where each went). A media item over the byte limit (``media.media_limit``) is left
out with a notice, never truncated.

Responses may be the official SDKs' objects (``anthropic.types.Message``,
``openai.types.chat.ChatCompletion``, ``openai.types.responses.Response``: any object with the
attributes) or plain dicts of the same JSON (``{"content": [...]}`` and so on).

The text of a result (``tool_result.content``, ``role: tool`` ``content``,
``function_call_output.output``) is :func:`tool_result_text` of the call's envelope:
``render_result`` of the value on success (limit: the tool's ``max_result_chars``, else the
registry's, else 2000 characters), the envelope's ``error.message`` on failure. Only the
Anthropic format has an error flag: ``"is_error": true`` is set on the ``tool_result`` blocks
of failed calls (and left out on successes).

Every helper takes ``invoker`` — an ``Invoker`` (keep one per conversation, or pass a ``ctx``
with a ``run_id``, so repeat detection and idempotency see every turn) or a ``ToolRegistry``
(a fresh default-chain ``Invoker`` per call, which then remembers nothing between turns).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from . import _core
from .dispatch import _SURROGATE, render_result
from .media import anthropic_content, media_limit, openai_chat_content, openai_responses_output, result_parts

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "anthropic_tool_calls",
    "anthropic_tool_results",
    "openai_chat_tool_calls",
    "openai_chat_tool_results",
    "openai_responses_tool_calls",
    "openai_responses_tool_results",
    "result_limit",
    "tool_result_text",
    "DEDUPLICATED_NOTICE",
]

#: The limit of a rendered result when neither the tool nor the registry sets one.
DEFAULT_MAX_RESULT_CHARS = 2000


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` for a mapping, ``obj.key`` for an SDK object; ``default`` when absent."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _invoker(invoker: Any) -> Any:
    if hasattr(invoker, "invoke_many"):
        return invoker
    from .invoker import Invoker

    return Invoker(invoker)


def result_limit(registry: Any, name: Any) -> int:
    """The character limit of the rendered result of tool ``name``: the tool's
    ``max_result_chars``, else the registry's, else 2000."""
    tool = registry.get(name) if isinstance(name, str) and name in registry else None
    limit = getattr(tool, "max_result_chars", None) or getattr(registry, "max_result_chars", None)
    return int(limit or DEFAULT_MAX_RESULT_CHARS)


#: The sentence that opens what the model reads of a deduplicated success (``"deduplicated":
#: True``): the call was not run again, so the model must not report a second effect.
DEDUPLICATED_NOTICE = (
    "This exact call already ran earlier in this conversation and was not run again; "
    "the result below is from that earlier run.\n"
)


def tool_result_text(envelope: Mapping[str, Any], *, max_chars: int = DEFAULT_MAX_RESULT_CHARS, value: Any = None) -> str:
    """The text the model reads for one call: ``render_result(envelope["value"],
    max_chars=max_chars)`` when ``envelope["ok"]``, else ``envelope["error"]["message"]`` (the
    actionable message; the error code when a message is missing). A deduplicated success
    starts with one sentence saying that this exact call already ran in this conversation and
    was not run again (``DEDUPLICATED_NOTICE``; the limit applies to the result after it).
    ``value``: render this instead of ``envelope["value"]`` (the MCP server passes the JSON data
    of a structured result). An error message longer than ``max_chars`` (at least
    ``DEFAULT_MAX_RESULT_CHARS``, so a small result limit never cuts an actionable message) keeps
    its start and its end around a marker saying how much was cut: a tool's own message, or an
    exception's text, may echo a huge argument. The Anthropic and OpenAI round-trips and the MCP
    server all use this function."""
    if envelope.get("ok"):
        text = render_result(envelope.get("value") if value is None else value, max_chars=max_chars)
        return DEDUPLICATED_NOTICE + text if envelope.get("deduplicated") else text
    error = envelope.get("error") or {}
    message = str(error.get("message") or error.get("code") or "the tool call failed")
    limit = max(max_chars, DEFAULT_MAX_RESULT_CHARS)
    try:
        return _core.cut_message(message, limit)  # type: ignore[no-any-return]
    except UnicodeEncodeError:  # a lone surrogate: shown as U+FFFD, never an exception
        return _core.cut_message(_SURROGATE.sub("\ufffd", message), limit)  # type: ignore[no-any-return]


def _media_parts(envelope: Mapping[str, Any], max_chars: int) -> list[Any] | None:
    """The parts of a successful result holding media (``media.result_parts``, text parts
    rendered with the text limit), led by whatever text a success without a value reads (the
    deduplication sentence); None for any other envelope."""
    if not envelope.get("ok"):
        return None
    parts = result_parts(envelope.get("value"), render=lambda v: render_result(v, max_chars=max_chars))
    if parts is not None:
        lead = tool_result_text({**envelope, "value": ""}, max_chars=max_chars).strip()
        if lead:
            parts.insert(0, lead)
    return parts


async def _run(invoker: Any, calls: list[dict[str, Any]], ctx: Any) -> tuple[Any, list[dict[str, Any]]]:
    inv = _invoker(invoker)
    envelopes = await inv.invoke_many(calls, ctx) if calls else []
    return inv.registry, envelopes


# ---------------------------------------------------------------------------- Anthropic


def anthropic_tool_calls(response: Any) -> list[dict[str, Any]]:
    """The ``tool_use`` blocks of an Anthropic Messages response (a ``Message``, a dict with
    ``content``, or a list of content blocks) as Invoker calls ``{"id", "name", "input"}``, in
    order. Other blocks (text, thinking, server tools) are skipped."""
    blocks = response if isinstance(response, Sequence) and not isinstance(response, str) else _get(response, "content")
    calls = []
    for block in blocks or ():
        if _get(block, "type") == "tool_use":
            calls.append({"id": _get(block, "id"), "name": _get(block, "name"), "input": _get(block, "input")})
    return calls


async def anthropic_tool_results(response: Any, invoker: Any, ctx: Any = None) -> dict[str, Any] | None:
    """Run the ``tool_use`` blocks of an Anthropic Messages ``response`` and return the next
    user message: ``{"role": "user", "content": [{"type": "tool_result", "tool_use_id",
    "content": text, "is_error": True?}, ...]}`` with one block per call in call order
    (``is_error`` only on failed calls). None when the response asks for no tool (the loop is
    done). ``ctx`` is passed to the Invoker. Never raises for a failing tool: the failure is
    the block's text."""
    calls = anthropic_tool_calls(response)
    if not calls:
        return None
    registry, envelopes = await _run(invoker, calls, ctx)
    blocks = []
    for call, env in zip(calls, envelopes):
        limit = result_limit(registry, call["name"])
        parts = _media_parts(env, limit)
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": tool_result_text(env, max_chars=limit)
            if parts is None
            else anthropic_content(parts, max_media_bytes=media_limit(registry, call["name"])),
        }
        if not env.get("ok"):
            block["is_error"] = True
        blocks.append(block)
    return {"role": "user", "content": blocks}


# ---------------------------------------------------------------------------- OpenAI Chat


def openai_chat_tool_calls(completion: Any) -> list[dict[str, Any]]:
    """The function ``tool_calls`` of an OpenAI Chat completion's first choice (a
    ``ChatCompletion``, its dict, or a ``message`` / dict with ``tool_calls``) as Invoker calls
    ``{"id", "function": {"name", "arguments"}}`` (``arguments`` as the model's JSON text), in
    order. Custom (non-function) tool calls are skipped."""
    choices = _get(completion, "choices")
    message = _get(choices[0], "message") if choices else completion
    calls = []
    for tc in _get(message, "tool_calls") or ():
        fn = _get(tc, "function")
        if fn is None or _get(tc, "type", "function") != "function":
            continue
        calls.append({"id": _get(tc, "id"), "function": {"name": _get(fn, "name"), "arguments": _get(fn, "arguments")}})
    return calls


def _strict_arguments(registry: Any, name: Any, arguments: Any) -> Any:
    """Arguments of a call made through an OpenAI strict rendering, with the ``null`` of
    "not given" removed (``providers.from_strict_arguments``); unparsable text is left for the
    Invoker to report."""
    from .providers import from_strict_arguments

    if not isinstance(name, str) or name not in registry:
        return arguments
    tool = registry.get(name)
    if getattr(tool, "schema", None) is None:
        return arguments
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments
    if not isinstance(args, Mapping):
        return arguments
    return from_strict_arguments(tool, args)


async def openai_chat_tool_results(
    completion: Any, invoker: Any, ctx: Any = None, *, strict: bool = False
) -> list[dict[str, Any]]:
    """Run the tool calls of an OpenAI Chat ``completion`` and return one ``{"role": "tool",
    "tool_call_id", "content": text}`` message per call, in call order ([] when there is none),
    then, when results hold images or files, one ``{"role": "user", "content": [...]}`` message
    carrying them (the Chat API takes no image in a ``tool`` message).
    ``strict=True``: the tools were sent with the strict rendering (``to_openai(strict=True)``),
    so a ``null`` argument means "not given" and is dropped before validation."""
    calls = openai_chat_tool_calls(completion)
    inv = _invoker(invoker)
    if strict:
        for call in calls:
            fn = call["function"]
            fn["arguments"] = _strict_arguments(inv.registry, fn["name"], fn["arguments"])
    registry, envelopes = await _run(inv, calls, ctx)
    messages: list[dict[str, Any]] = []
    attachments: list[dict[str, Any]] = []
    for call, env in zip(calls, envelopes):
        name = call["function"]["name"]
        limit = result_limit(registry, name)
        parts = _media_parts(env, limit)
        if parts is None:
            text = tool_result_text(env, max_chars=limit)
        else:
            text, moved = openai_chat_content(parts, call["id"], max_media_bytes=media_limit(registry, name))
            attachments.extend(moved)
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    if attachments:
        messages.append({"role": "user", "content": attachments})
    return messages


# ---------------------------------------------------------------------------- OpenAI Responses


def openai_responses_tool_calls(response: Any) -> list[dict[str, Any]]:
    """The ``function_call`` items of an OpenAI Responses ``response`` (a ``Response``, its dict,
    or a list of output items) as Invoker calls ``{"call_id", "name", "arguments"}``, in order."""
    items = response if isinstance(response, Sequence) and not isinstance(response, str) else _get(response, "output")
    calls = []
    for item in items or ():
        if _get(item, "type") == "function_call":
            calls.append({"call_id": _get(item, "call_id"), "name": _get(item, "name"), "arguments": _get(item, "arguments")})
    return calls


async def openai_responses_tool_results(
    response: Any, invoker: Any, ctx: Any = None, *, strict: bool = False
) -> list[dict[str, Any]]:
    """Run the ``function_call`` items of an OpenAI Responses ``response`` and return one
    ``{"type": "function_call_output", "call_id", "output": text}`` item per call, in call order
    ([] when there is none); a result holding media has a list of ``input_text`` /
    ``input_image`` / ``input_file`` items as its ``output``. ``strict`` as for :func:`openai_chat_tool_results`."""
    calls = openai_responses_tool_calls(response)
    inv = _invoker(invoker)
    if strict:
        for call in calls:
            call["arguments"] = _strict_arguments(inv.registry, call["name"], call["arguments"])
    registry, envelopes = await _run(inv, calls, ctx)
    items = []
    for call, env in zip(calls, envelopes):
        limit = result_limit(registry, call["name"])
        parts = _media_parts(env, limit)
        output: Any = (
            tool_result_text(env, max_chars=limit)
            if parts is None
            else openai_responses_output(parts, max_media_bytes=media_limit(registry, call["name"]))
        )
        items.append({"type": "function_call_output", "call_id": call["call_id"], "output": output})
    return items

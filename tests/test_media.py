"""Results of any kind: ``ToolImage`` / ``ToolFile`` and mixed lists, carried natively by each
rendering and checked with the provider SDKs' own request types (``anthropic``, ``openai``) and
the official ``mcp`` client."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from anthropic.types import DocumentBlockParam, ImageBlockParam, TextBlockParam
from mcp import Client
from openai.types.chat import ChatCompletionToolMessageParam, ChatCompletionUserMessageParam
from openai.types.responses.response_input_item_param import FunctionCallOutput
from pydantic import TypeAdapter

from agentkit_tools import Invoker, ToolRegistry, dispatch, render_result, tool
from agentkit_tools.mcp_server import build_server
from agentkit_tools.media import DEFAULT_MAX_MEDIA_BYTES, ToolFile, ToolImage, result_parts
from agentkit_tools.roundtrip import anthropic_tool_results, openai_chat_tool_results, openai_responses_tool_results


def png(width: int = 1, height: int = 1) -> bytes:
    """A valid RGB PNG of the given size (all pixels red)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


PNG = png()
PNG_B64 = base64.b64encode(PNG).decode()
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
PDF_B64 = base64.b64encode(PDF).decode()


@tool(read_only=True)
def chart(month: str) -> list[Any]:
    """Draw the sales chart of a month and return it with a caption and the raw report.

    Args:
        month: The month, e.g. 2026-03.
    """
    return [f"Sales of {month}:", ToolImage(PNG), {"total": 12}, ToolFile(PDF, name="report.pdf")]


@tool(read_only=True)
def photo(big: bool = False) -> ToolImage:
    """Return the product photo of the shop, optionally as the full-size original.

    Args:
        big: Whether to return the full-size original.
    """
    return ToolImage(b"\x89PNG\r\n\x1a\n" + b"\x00" * (DEFAULT_MAX_MEDIA_BYTES if big else 16))


REG = ToolRegistry([chart, photo])
TOO_LARGE = (
    f"[image: image/png, {DEFAULT_MAX_MEDIA_BYTES + 8} bytes not sent: over the limit of {DEFAULT_MAX_MEDIA_BYTES} "
    "bytes for one image in a tool result. Ask the tool for a smaller image (a lower resolution, a crop, fewer "
    "pages) if it offers that; otherwise tell the user it was too large to show.]"
)


# ------------------------------------------------------------------ the public types


def test_media_types(tmp_path: Path) -> None:
    img = ToolImage(PNG)
    assert (img.mime, img.size, img.name, img.base64()) == ("image/png", len(PNG), None, PNG_B64)
    assert img.data_url() == f"data:image/png;base64,{PNG_B64}"
    assert str(img) == f"[image: image/png, {len(PNG)} bytes]"
    assert ToolImage(b"\xff\xd8\xff\xe0rest").mime == "image/jpeg"
    assert ToolImage(b"RIFF\x00\x00\x00\x00WEBPVP8 ").mime == "image/webp"
    path = tmp_path / "shot.jpg"
    path.write_bytes(PNG)
    from_path = ToolImage(path=path)
    assert (from_path.mime, from_path.name, from_path.data) == ("image/jpeg", "shot.jpg", PNG)
    doc = ToolFile(PDF)
    assert (doc.mime, doc.filename()) == ("application/pdf", "file.pdf")
    assert ToolFile(b"\x00\x01").mime == "application/octet-stream"
    assert ToolFile(PDF, name="a.pdf") == ToolFile(PDF, name="a.pdf") != ToolFile(PDF)

    with pytest.raises(ValueError, match=r"^ToolImage needs exactly one of data= \(bytes\) or path=$"):
        ToolImage()
    with pytest.raises(ValueError, match=r"^ToolImage: 'application/pdf' is not an image type; return a ToolFile"):
        ToolImage(PDF)
    with pytest.raises(TypeError, match=r"^ToolImage: data must be bytes, got str$"):
        ToolImage("iVBOR")  # type: ignore[arg-type]


def test_parts_and_text_only_rendering() -> None:
    value = chart.func("2026-03")  # type: ignore[misc]
    assert result_parts(value, render=render_result) == [
        "Sales of 2026-03:",
        ToolImage(PNG),
        '{"total": 12}',
        ToolFile(PDF, name="report.pdf"),
    ]
    assert result_parts({"a": 1}, render=render_result) is None
    # a text-only surface sees a placeholder, never the bytes
    assert render_result(value) == (
        f'["Sales of 2026-03:", "[image: image/png, {len(PNG)} bytes]", {{"total": 12}}, '
        f'"[file \'report.pdf\': application/pdf, {len(PDF)} bytes]"]'
    )
    env = dispatch({"id": "1", "name": "chart", "input": {"month": "2026-03"}}, REG)
    assert env["ok"] is True and env["value"][1] == ToolImage(PNG)


# ------------------------------------------------------------------ providers


async def test_anthropic_image_and_document_blocks() -> None:
    response = {"content": [{"type": "tool_use", "id": "t1", "name": "chart", "input": {"month": "2026-03"}}]}
    message = await anthropic_tool_results(response, REG)
    assert message == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [
                    {"type": "text", "text": "Sales of 2026-03:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
                    {"type": "text", "text": '{"total": 12}'},
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
                        "title": "report.pdf",
                    },
                ],
            }
        ],
    }
    # the SDK's own types accept every block (pydantic cannot build the whole ToolResultBlockParam
    # union: its recursive definitions make pydantic-core panic, so each block type is checked)
    adapters = {"text": TextBlockParam, "image": ImageBlockParam, "document": DocumentBlockParam}
    for block in message["content"][0]["content"]:
        assert TypeAdapter(adapters[block["type"]]).validate_python(block) == block


async def test_openai_responses_content_items() -> None:
    response = {"output": [{"type": "function_call", "call_id": "c1", "name": "chart", "arguments": '{"month": "2026-03"}'}]}
    [item] = await openai_responses_tool_results(response, REG)
    assert item == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_text", "text": "Sales of 2026-03:"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}"},
            {"type": "input_text", "text": '{"total": 12}'},
            {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF_B64}"},
        ],
    }
    checked = TypeAdapter(FunctionCallOutput).validate_python(item)
    assert len(list(checked["output"])) == 4


async def test_openai_chat_moves_media_to_a_user_message() -> None:
    completion = {
        "choices": [
            {
                "message": {
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "chart", "arguments": '{"month": "2026-03"}'}},
                        {"id": "c2", "type": "function", "function": {"name": "photo", "arguments": "{}"}},
                    ]
                }
            }
        ]
    }
    messages = await openai_chat_tool_results(completion, REG)
    small = ToolImage(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).data_url()
    assert messages == [
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "Sales of 2026-03:\n[image 1 of this result is attached to the next user message]\n"
            '{"total": 12}\n[file 2 of this result is attached to the next user message]',
        },
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": "[image 1 of this result is attached to the next user message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Attachments returned by tool call c1, in order:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
                {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF_B64}"}},
                {"type": "text", "text": "Attachments returned by tool call c2, in order:"},
                {"type": "image_url", "image_url": {"url": small}},
            ],
        },
    ]
    TypeAdapter(ChatCompletionToolMessageParam).validate_python(messages[0])
    user = TypeAdapter(ChatCompletionUserMessageParam).validate_python(messages[2])
    assert len(list(user["content"])) == 5


async def test_over_the_limit_is_a_notice_not_a_truncation() -> None:
    response = {"content": [{"type": "tool_use", "id": "t1", "name": "photo", "input": {"big": True}}]}
    message = await anthropic_tool_results(response, REG)
    assert message["content"][0]["content"] == [{"type": "text", "text": TOO_LARGE}]
    # a registry (or tool) limit applies the same way
    small = ToolRegistry([chart], max_media_bytes=len(PNG))
    [item] = await openai_responses_tool_results(
        [{"type": "function_call", "call_id": "c1", "name": "chart", "arguments": '{"month": "m"}'}], small
    )
    assert [part["type"] for part in item["output"]] == ["input_text", "input_image", "input_text", "input_text"]
    assert item["output"][3]["text"].startswith(
        f"[file 'report.pdf': application/pdf, {len(PDF)} bytes not sent: over the limit of {len(PNG)} bytes for one file"
    )


async def test_unsupported_type_is_a_notice() -> None:
    @tool(read_only=True)
    def tiff() -> ToolImage:
        """Return the scanned page as the TIFF image the scanner produced."""
        return ToolImage(b"II*\x00", mime="image/tiff")

    message = await anthropic_tool_results(
        {"content": [{"type": "tool_use", "id": "t1", "name": "tiff", "input": {}}]}, ToolRegistry([tiff])
    )
    assert message["content"][0]["content"] == [
        {
            "type": "text",
            "text": "[image: image/tiff, 4 bytes not sent: the Anthropic API does not accept image/tiff (images: "
            "JPEG, PNG, GIF, WebP). Tell the user the tool returned a file that cannot be shown here.]",
        }
    ]


# ------------------------------------------------------------------ MCP


async def test_mcp_image_and_embedded_resource_through_the_official_client() -> None:
    async with Client(build_server(REG)) as client:
        result = await client.call_tool("chart", {"month": "2026-03"})
        big = await client.call_tool("photo", {"big": True})
    assert result.is_error is False
    assert result.content == [
        types.TextContent(text="Sales of 2026-03:"),
        types.ImageContent(data=PNG_B64, mime_type="image/png"),
        types.TextContent(text='{"total": 12}'),
        types.EmbeddedResource(
            resource=types.BlobResourceContents(uri="attachment:///report.pdf", mime_type="application/pdf", blob=PDF_B64)
        ),
    ]
    assert base64.b64decode(result.content[1].data) == PNG
    assert big.content == [types.TextContent(text=TOO_LARGE)]

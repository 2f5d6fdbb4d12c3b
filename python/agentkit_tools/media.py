"""Tool results that are not only text: images and files.

A tool returns a :class:`ToolImage` or a :class:`ToolFile`, or a list mixing them with text (and
any other values, rendered as text), for example ``["the chart of March:", ToolImage(path=
"march.png")]``. Each rendering for a model carries the media natively:

- Anthropic Messages: ``tool_result`` content blocks of type ``image`` (JPEG, PNG, GIF, WebP)
  and ``document`` (PDF as base64, ``text/*`` files as plain text);
- OpenAI Responses: ``function_call_output.output`` as a list of ``input_text`` /
  ``input_image`` / ``input_file`` items;
- OpenAI Chat Completions: a ``role: "tool"`` message can only hold text, so the tool message
  says where the media went and one follow-up ``role: "user"`` message after the tool messages
  carries it (``image_url`` and ``file`` content parts);
- MCP: ``ImageContent``, ``AudioContent`` and ``EmbeddedResource`` (a blob) content blocks.

Binary data is never truncated: a media item over the limit (``max_media_bytes``: the tool's
attribute, else the registry's, else :data:`DEFAULT_MAX_MEDIA_BYTES`) or of a type the
provider cannot take is left out and replaced by a text notice saying what was left out, why,
and what to do instead.
"""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = [
    "DEFAULT_MAX_MEDIA_BYTES",
    "ToolFile",
    "ToolImage",
    "anthropic_content",
    "has_media",
    "mcp_content",
    "media_limit",
    "openai_chat_content",
    "openai_responses_output",
    "result_parts",
    "within_limit",
]

#: The default limit of one media item in a result, in bytes (5 MiB, Anthropic's per-image
#: limit). Set ``max_media_bytes`` on a tool or a registry to change it.
DEFAULT_MAX_MEDIA_BYTES = 5 * 1024 * 1024

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


def _sniff(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class _Media:
    """Bytes with a MIME type (the shared part of :class:`ToolImage` and :class:`ToolFile`)."""

    __slots__ = ("data", "mime", "name", "_b64")
    kind = "file"

    def __init__(
        self, data: bytes | bytearray | memoryview | None = None, *, path: str | Path | None = None,
        mime: str | None = None, name: str | None = None,
    ) -> None:
        if (data is None) == (path is None):
            raise ValueError(f"{type(self).__name__} needs exactly one of data= (bytes) or path=")
        if path is not None:
            p = Path(path)
            data = p.read_bytes()
            name = name or p.name
            mime = mime or mimetypes.guess_type(p.name)[0]
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"{type(self).__name__}: data must be bytes, got {type(data).__name__}")
        self.data = bytes(data)
        self.mime = mime or _sniff(self.data) or self._default_mime()
        self.name = name
        self._b64: str | None = None
        self._check()

    def _default_mime(self) -> str:
        return "application/octet-stream"

    def _check(self) -> None:
        pass

    @property
    def size(self) -> int:
        """The size of the data in bytes."""
        return len(self.data)

    def base64(self) -> str:
        """The data as base64 text (computed once)."""
        if self._b64 is None:
            self._b64 = base64.b64encode(self.data).decode("ascii")
        return self._b64

    def data_url(self) -> str:
        """``data:<mime>;base64,<data>``."""
        return f"data:{self.mime};base64,{self.base64()}"

    def filename(self) -> str:
        """The name given (or the path's), else ``<kind>`` with the extension of the MIME type."""
        return self.name or f"{self.kind}{mimetypes.guess_extension(self.mime) or ''}"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (self.data, self.mime, self.name) == (other.data, other.mime, other.name)

    def __hash__(self) -> int:
        return hash((type(self), self.data, self.mime, self.name))

    def __repr__(self) -> str:
        named = f", name={self.name!r}" if self.name else ""
        return f"{type(self).__name__}(<{self.size} bytes>, mime={self.mime!r}{named})"

    def __str__(self) -> str:
        # What a text-only rendering (render_result, a framework without media) shows.
        named = f" {self.name!r}" if self.name else ""
        return f"[{self.kind}{named}: {self.mime}, {self.size} bytes]"


class ToolImage(_Media):
    """An image a tool returns: ``ToolImage(data, mime=...)`` or ``ToolImage(path=...)``.

    ``data``: the encoded image bytes (PNG, JPEG, GIF, WebP...); ``path``: a file to read them
    from (read at construction, in the tool body). ``mime``: the MIME type; guessed from the
    path's extension, else from the data's first bytes, else ``image/png``. ``name``: shown to
    the model (default: the path's file name). Raises ``ValueError`` for a non-``image/`` type
    or when neither or both of ``data``/``path`` are given, ``OSError`` when the path cannot be
    read.
    """

    __slots__ = ()
    kind = "image"

    def _default_mime(self) -> str:
        return "image/png"

    def _check(self) -> None:
        if not self.mime.startswith("image/"):
            raise ValueError(f"ToolImage: {self.mime!r} is not an image type; return a ToolFile for other files")


class ToolFile(_Media):
    """A file a tool returns (a PDF, a text file, audio...): ``ToolFile(data, mime=..., name=...)``
    or ``ToolFile(path=...)``. ``mime`` is guessed from the path's extension, else from the
    data's first bytes, else ``application/octet-stream``. Which types reach the model depends on
    the provider (PDF and ``text/*`` everywhere media is carried); others are replaced by a
    notice."""

    __slots__ = ()


Part = Any  # str | ToolImage | ToolFile


def has_media(value: Any) -> bool:
    """Whether a tool's value is media or a list/tuple holding at least one media item."""
    if isinstance(value, _Media):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(v, _Media) for v in value)


def result_parts(value: Any, *, render: Callable[[Any], str]) -> list[Part] | None:
    """The parts of a media result in order (``str`` texts and media items), or None when
    ``value`` holds no media (the plain text rendering applies). A non-text, non-media item of a
    list (a ``str`` too: ``render`` applies the text limit) is rendered with ``render``;
    consecutive texts are joined with a newline."""
    if not has_media(value):
        return None
    items = value if isinstance(value, (list, tuple)) else [value]
    parts: list[Part] = []
    for item in items:
        if isinstance(item, _Media):
            parts.append(item)
            continue
        text = render(item)
        if parts and isinstance(parts[-1], str):
            parts[-1] = parts[-1] + "\n" + text
        else:
            parts.append(text)
    return parts


def media_limit(registry: Any, name: Any) -> int:
    """The byte limit of one media item in a result of tool ``name``: the tool's
    ``max_media_bytes``, else the registry's, else :data:`DEFAULT_MAX_MEDIA_BYTES`."""
    tool = registry.get(name) if registry is not None and isinstance(name, str) and name in registry else None
    limit = getattr(tool, "max_media_bytes", None) or getattr(registry, "max_media_bytes", None)
    return int(limit or DEFAULT_MAX_MEDIA_BYTES)


def _too_large(item: _Media, limit: int) -> str:
    return (
        f"[{str(item)[1:-1]} not sent: over the limit of {limit} bytes for one {item.kind} in a tool "
        f"result. Ask the tool for a smaller {item.kind} (a lower resolution, a crop, fewer pages) "
        "if it offers that; otherwise tell the user it was too large to show.]"
    )


def within_limit(parts: list[Part], max_media_bytes: int = DEFAULT_MAX_MEDIA_BYTES) -> list[Part]:
    """``parts`` with every media item over ``max_media_bytes`` replaced by the text notice the
    renderings use (for surfaces that carry media items themselves, such as other frameworks)."""
    return [_too_large(p, max_media_bytes) if isinstance(p, _Media) and p.size > max_media_bytes else p for p in parts]


def _unsupported(item: _Media, where: str, accepted: str) -> str:
    return (
        f"[{str(item)[1:-1]} not sent: {where} does not accept {item.mime} ({accepted}). "
        "Tell the user the tool returned a file that cannot be shown here.]"
    )


def _walk(
    parts: Iterable[Part], limit: int, text: Callable[[str], Any], media: Callable[[_Media], Any | str]
) -> list[Any]:
    """Blocks of ``parts``: texts through ``text``; media through ``media`` (which returns a
    block, or a notice string when it cannot carry the item); items over ``limit`` → notice."""
    out: list[Any] = []
    for part in parts:
        if isinstance(part, str):
            out.append(text(part))
            continue
        block = _too_large(part, limit) if part.size > limit else media(part)
        out.append(text(block) if isinstance(block, str) else block)
    return out


# ---------------------------------------------------------------------------- Anthropic

_ANTHROPIC_IMAGES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _anthropic_media(item: _Media) -> Any:
    if isinstance(item, ToolImage) or item.mime.startswith("image/"):
        if item.mime not in _ANTHROPIC_IMAGES:
            return _unsupported(item, "the Anthropic API", "images: JPEG, PNG, GIF, WebP")
        return {"type": "image", "source": {"type": "base64", "media_type": item.mime, "data": item.base64()}}
    if item.mime == "application/pdf":
        block: dict[str, Any] = {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": item.base64()},
        }
    elif item.mime.startswith("text/"):
        try:
            data = item.data.decode("utf-8")
        except UnicodeDecodeError:
            return _unsupported(item, "the Anthropic API", "text documents must be UTF-8")
        block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": data}}
    else:
        return _unsupported(item, "the Anthropic API", "documents: PDF and plain text")
    if item.name:
        block["title"] = item.name
    return block


def anthropic_content(parts: list[Part], *, max_media_bytes: int = DEFAULT_MAX_MEDIA_BYTES) -> list[dict[str, Any]]:
    """The ``content`` list of an Anthropic ``tool_result`` block: ``text``, ``image`` (base64)
    and ``document`` (PDF base64, or plain text) blocks, in order."""
    return _walk(parts, max_media_bytes, lambda t: {"type": "text", "text": t}, _anthropic_media)


# ---------------------------------------------------------------------------- OpenAI


def _openai_file_ok(item: _Media) -> bool:
    return item.mime == "application/pdf" or item.mime.startswith("text/")


def _responses_media(item: _Media) -> Any:
    if isinstance(item, ToolImage):
        return {"type": "input_image", "image_url": item.data_url()}
    if not _openai_file_ok(item):
        return _unsupported(item, "the OpenAI API", "files: PDF and text")
    return {"type": "input_file", "filename": item.filename(), "file_data": item.data_url()}


def openai_responses_output(parts: list[Part], *, max_media_bytes: int = DEFAULT_MAX_MEDIA_BYTES) -> list[dict[str, Any]]:
    """The ``output`` list of an OpenAI Responses ``function_call_output`` item: ``input_text``,
    ``input_image`` (a data URL) and ``input_file`` (``file_data`` as a data URL) items."""
    return _walk(parts, max_media_bytes, lambda t: {"type": "input_text", "text": t}, _responses_media)


def _chat_media(item: _Media) -> Any:
    if isinstance(item, ToolImage):
        return {"type": "image_url", "image_url": {"url": item.data_url()}}
    if not _openai_file_ok(item):
        return _unsupported(item, "the OpenAI API", "files: PDF and text")
    return {"type": "file", "file": {"filename": item.filename(), "file_data": item.data_url()}}


def openai_chat_content(
    parts: list[Part], call_id: str, *, max_media_bytes: int = DEFAULT_MAX_MEDIA_BYTES
) -> tuple[str, list[dict[str, Any]]]:
    """``(tool message text, user content parts)`` for OpenAI Chat Completions, whose ``tool``
    messages hold text only: each media item is moved to the parts of a user message sent
    after the tool messages, and the tool text says so at its place (``[image 1 of this result
    is attached to the next user message]``). Parts that cannot be carried become notices in
    the tool text."""
    texts: list[str] = []
    moved: list[dict[str, Any]] = []
    for block in _walk(parts, max_media_bytes, lambda t: t, _chat_media):
        if isinstance(block, str):
            texts.append(block)
            continue
        kind = "image" if block["type"] == "image_url" else "file"
        texts.append(f"[{kind} {len(moved) + 1} of this result is attached to the next user message]")
        moved.append(block)
    if moved:
        moved.insert(0, {"type": "text", "text": f"Attachments returned by tool call {call_id}, in order:"})
    return "\n".join(texts), moved


# ---------------------------------------------------------------------------- MCP


def mcp_content(parts: list[Part], *, max_media_bytes: int = DEFAULT_MAX_MEDIA_BYTES) -> list[Any]:
    """MCP content blocks (``mcp_types``): ``TextContent``, ``ImageContent`` for images,
    ``AudioContent`` for ``audio/*`` files, and an ``EmbeddedResource`` holding a
    ``BlobResourceContents`` (URI ``attachment:///<file name>``) for other files."""
    import mcp_types as types

    def media(item: _Media) -> Any:
        if isinstance(item, ToolImage):
            return types.ImageContent(data=item.base64(), mime_type=item.mime)
        if item.mime.startswith("audio/"):
            return types.AudioContent(data=item.base64(), mime_type=item.mime)
        resource = types.BlobResourceContents(
            uri=f"attachment:///{item.filename()}", mime_type=item.mime, blob=item.base64()
        )
        return types.EmbeddedResource(resource=resource)

    return _walk(parts, max_media_bytes, lambda t: types.TextContent(text=t), media)

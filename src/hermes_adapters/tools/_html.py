"""Turning third-party content into text a model may read: HTML to Markdown, clipped, wrapped.

The ``web`` tools (:mod:`hermes_adapters.tools.web`) fetch and search; this module is the
pure text work they share, kept apart so it can be tested without a network and reused by
any tool that hands a page to the model.

Pages become Markdown with ``markdownify`` over BeautifulSoup's stdlib ``html.parser``
(MIT licensed, pure Python, no lxml); scripts, styles and page chrome are dropped first. A
page over its limit keeps its head and tail around a marker (:func:`clip_middle`). Whatever
goes back to the model is wrapped in ``<untrusted_tool_result source="NAME">…
</untrusted_tool_result>`` (:func:`wrap_untrusted`, REFERENCE.md §1) so it can tell a page's
words from the user's.
"""

from __future__ import annotations

import re
from typing import Any, Final

from bs4 import BeautifulSoup, Tag
from markdownify import MarkdownConverter

from hermes_adapters.tools.ssrf import FetchedPage

__all__ = [
    "HEAD_SHARE",
    "UNTRUSTED_MIN_CHARS",
    "clip_middle",
    "html_to_markdown",
    "page_text",
    "wrap_untrusted",
]

UNTRUSTED_MIN_CHARS: Final = 32
HEAD_SHARE: Final = 2 / 3
_MARKER_RESERVE: Final = 120

_TEXT_TYPES: Final = (
    "application/json",
    "application/xml",
    "application/javascript",
    "application/x-ndjson",
)
_HTML_TYPES: Final = ("text/html", "application/xhtml+xml")
_DROP_TAGS: Final = (
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "canvas",
    "iframe",
    "object",
    "embed",
    "nav",
    "aside",
    "footer",
    "form",
    "button",
    "select",
    "textarea",
    "input",
)
_UNTRUSTED_TAG = re.compile(r"<(/?untrusted_tool_result)", re.IGNORECASE)
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def wrap_untrusted(source: str, text: str) -> str:
    """``text`` inside the untrusted-result wrapper when it is long enough to carry a payload.

    ``text`` is JSON; any ``<untrusted_tool_result`` inside it (necessarily inside a JSON
    string) is written as ``\\u003c...``, so the JSON still decodes to the original but a
    page cannot end the wrapper and speak as the harness.
    """
    if len(text) < UNTRUSTED_MIN_CHARS:
        return text
    safe = _UNTRUSTED_TAG.sub(r"\\u003c\1", text)
    return f'<untrusted_tool_result source="{source}">\n{safe}\n</untrusted_tool_result>'


def clip_middle(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a marker.

    The head gets two thirds: a page's opening (title, summary, first sections) is worth
    more than its end, but the end often holds conclusions or references.
    """
    if len(text) <= limit:
        return text
    keep = max(limit - _MARKER_RESERVE, 0)
    head = int(keep * HEAD_SHARE)
    tail = keep - head
    omitted = len(text) - head - tail
    marker = (
        f"\n\n[... {omitted} characters omitted from the middle of this page "
        f"({len(text)} total); raise char_limit to see more ...]\n\n"
    )
    return text[:head] + marker + (text[-tail:] if tail else "")


class _Converter(MarkdownConverter):
    """Markdown without images (a data URI or tracking pixel is noise to the model)."""

    def convert_img(self, el: Any, text: str, parent_tags: Any) -> str:
        alt = el.attrs.get("alt") or ""
        return str(alt)


_CONVERTER: Final = _Converter(
    heading_style="ATX",
    bullets="-",
    escape_asterisks=False,  # a model reads this, not a Markdown renderer: keep text as is
    escape_underscores=False,
    escape_misc=False,
)


def html_to_markdown(markup: bytes | str, encoding: str | None = None) -> tuple[str | None, str]:
    """The page's ``<title>`` and its readable content as Markdown.

    Scripts, styles, forms and navigation are removed; when the page marks its content
    with ``<main>`` or ``<article>`` only that is kept, else the ``<body>`` minus its
    ``<header>``. Bytes are decoded by the header's charset, else by BeautifulSoup's
    sniffing of ``<meta charset>`` and BOMs.
    """
    if isinstance(markup, bytes):
        soup = BeautifulSoup(markup, "html.parser", from_encoding=encoding)
    else:
        soup = BeautifulSoup(markup, "html.parser")
    title_tag = soup.find("title")
    title = title_tag.get_text(" ", strip=True) if isinstance(title_tag, Tag) else None
    for tag in soup.find_all(("head", *_DROP_TAGS)):
        tag.decompose()
    root = soup.find("main") or soup.find("article")
    if not isinstance(root, Tag):
        body = soup.find("body")
        root = body if isinstance(body, Tag) else soup
        for header in root.find_all("header"):
            header.decompose()
    text = _CONVERTER.convert_soup(root)
    return title or None, _tidy(text)


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def page_text(page: FetchedPage) -> tuple[str | None, str]:
    """A fetched page as (title, text); binary content is an error, not gibberish.

    Raises:
        ValueError: the content type is not text (an image, a PDF, unknown binary).
    """
    kind = page.content_type
    head = page.content[:512].lstrip().lower()
    if kind in _HTML_TYPES or (not kind and head.startswith((b"<!doctype html", b"<html"))):
        title, text = html_to_markdown(page.content, page.charset)
    elif kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith(("+json", "+xml")):
        title, text = None, page.content.decode(page.charset or "utf-8", errors="replace")
    elif not kind and b"\0" not in page.content[:8192]:
        title, text = None, page.content.decode("utf-8", errors="replace")
    else:
        raise ValueError(f"unsupported content type {kind or 'unknown (binary)'}")
    if page.truncated:
        text += f"\n\n[... page cut at {len(page.content)} bytes ...]"
    return title, text

"""Prompt-cache bookkeeping shared by the wire simulators (opt-in: ``simulate_cache=True``).

A request is read as a sequence of prompt *units* in the order the provider renders them
(tools, system, then message blocks or items). Each unit is its JSON as the client sent
it (key order kept, ``cache_control`` left out, as it is not part of the cached bytes;
the Chat simulator reads string content as one text part, which is what Claude behind a
gateway sees), so any byte change before a breakpoint, a reordered key included, misses.

Two policies, both estimating tokens as characters / 4 and ignoring the providers'
minimum cacheable length:

* :meth:`PromptCache.explicit` (Anthropic, Claude behind OpenRouter): a unit carrying
  ``cache_control`` is a breakpoint. The longest earlier-cached breakpoint prefix that this
  request repeats is a cache read; the rest up to the last breakpoint is a cache write, and
  every breakpoint prefix of this request is cached for later ones.
* :meth:`PromptCache.automatic` (OpenAI, DeepSeek, Responses): the longest prefix this
  request shares with an earlier one in the same scope is a read; nothing is reported as
  written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hermes_core.messages import Usage
from hermes_core.testing.llm import Scenario, Slow, TextReply, ToolCallReply, TruncatedStream

__all__ = ["CacheUsage", "PromptCache", "Unit", "unit", "with_usage"]

CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Unit:
    """One cacheable piece of a prompt: its bytes, and whether it ends a breakpoint."""

    text: str
    marked: bool = False


def _strip(value: Any) -> tuple[Any, bool]:
    """``value`` without ``cache_control`` keys (also in nested blocks), and whether any was
    there."""
    if isinstance(value, Mapping):
        marked = "cache_control" in value
        out = {}
        for key, item in value.items():
            if key == "cache_control":
                continue
            out[key], inner = _strip(item)
            marked = marked or inner
        return out, marked
    if isinstance(value, list):
        pairs = [_strip(item) for item in value]
        return [p[0] for p in pairs], any(p[1] for p in pairs)
    return value, False


def unit(value: Any) -> Unit:
    """A :class:`Unit` from a JSON value; marked if it (or a nested block) has a marker."""
    stripped, marked = _strip(value)
    return Unit(json.dumps(stripped, ensure_ascii=False, separators=(",", ":")), marked)


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """Estimated prompt tokens of one request, split into the canonical buckets."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def apply(self, usage: Usage) -> Usage:
        """``usage`` with its input buckets replaced (output and reasoning kept)."""
        return usage.model_copy(
            update={
                "input_tokens": self.input_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens,
            }
        )


def _tokens(chars: int) -> int:
    return chars // CHARS_PER_TOKEN


@dataclass(slots=True)
class PromptCache:
    """The prefixes cached so far, by digest (the scope, e.g. the model, is hashed in)."""

    _cached: set[str] = field(default_factory=set)

    @staticmethod
    def _prefixes(scope: str, units: Iterable[Unit]) -> list[tuple[str, int, bool]]:
        """``(digest, chars, marked)`` of every prefix ending at each unit."""
        out: list[tuple[str, int, bool]] = []
        digest = hashlib.sha256(scope.encode()).hexdigest()
        chars = 0
        for piece in units:
            digest = hashlib.sha256(f"{digest}\x00{piece.text}".encode()).hexdigest()
            chars += len(piece.text)
            out.append((digest, chars, piece.marked))
        return out

    def explicit(self, scope: str, units: Iterable[Unit]) -> CacheUsage:
        """Breakpoint caching: reads and writes up to the last marked unit."""
        prefixes = self._prefixes(scope, units)
        total = _tokens(prefixes[-1][1]) if prefixes else 0
        marks = [i for i, (_, _, marked) in enumerate(prefixes) if marked]
        if not marks:
            return CacheUsage(input_tokens=total)
        last = marks[-1]
        hits = [i for i in range(last + 1) if prefixes[i][0] in self._cached]
        read = _tokens(prefixes[hits[-1]][1]) if hits else 0
        write = _tokens(prefixes[last][1]) - read
        self._cached.update(prefixes[i][0] for i in marks)
        return CacheUsage(max(0, total - read - write), read, write)

    def automatic(self, scope: str, units: Iterable[Unit]) -> CacheUsage:
        """Prefix caching without markers: the longest prefix seen before is read."""
        prefixes = self._prefixes(scope, units)
        total = _tokens(prefixes[-1][1]) if prefixes else 0
        hits = [i for i, (digest, _, _) in enumerate(prefixes) if digest in self._cached]
        read = _tokens(prefixes[hits[-1]][1]) if hits else 0
        self._cached.update(digest for digest, _, _ in prefixes)
        return CacheUsage(input_tokens=total - read, cache_read_tokens=read)


def with_usage(scenario: Scenario, usage: Callable[[Usage], Usage]) -> Scenario:
    """``scenario`` with the usage of its reply (if it has one) passed through ``usage``."""
    if isinstance(scenario, TextReply | ToolCallReply):
        return replace(scenario, usage=usage(scenario.usage))
    if isinstance(scenario, Slow | TruncatedStream):
        return replace(scenario, reply=replace(scenario.reply, usage=usage(scenario.reply.usage)))
    return scenario

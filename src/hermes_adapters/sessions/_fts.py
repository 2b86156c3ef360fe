"""User text to FTS5 ``MATCH`` expressions that can never be a syntax error.

Raw user or model text (``it's``, ``a/b.py``, ``user@host``, ``multi-agent``, ``why?``) is
not valid FTS5 query syntax, and the reference store turned the resulting
``OperationalError`` into "0 results", so the agent believed its history was empty
(WIRE.md §4 item 19). Here every term is quoted as an FTS5 string (``"`` doubled), which
FTS5 reads as a phrase of whatever tokens the tokenizer finds in it: punctuation and
operators (``AND``, ``NEAR``, ``*``, ``(``) lose their meaning and the words inside are
still found. A balanced ``"quoted phrase"`` in the query stays one phrase.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_QUERY_CHARS",
    "has_word",
    "match_expression",
    "query_terms",
    "trigram_expression",
]

MAX_QUERY_CHARS = 2048
"""Longer queries are cut here: nobody types more, and FTS5 cost grows with terms."""

_PART = re.compile(r'"([^"]*\S[^"]*)"|(\S+)')
_TRIGRAM_MIN_CHARS = 3
"""The trigram tokenizer cannot match a string shorter than one trigram."""


def query_terms(query: str) -> list[str]:
    """The query's terms: balanced ``"phrases"`` (whitespace normalised) and bare words."""
    terms: list[str] = []
    for match in _PART.finditer(query[:MAX_QUERY_CHARS]):
        phrase, word = match.groups()
        terms.append(" ".join(phrase.split()) if phrase is not None else word)
    return terms


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def has_word(term: str) -> bool:
    """Whether a word index (unicode61, PostgreSQL's parser) finds at least one token (a
    letter or digit run) in ``term``."""
    return any(ch.isalnum() for ch in term)


def match_expression(terms: list[str]) -> str | None:
    """An implicit-AND of quoted terms for the unicode61 index, or ``None`` if no term has
    a word in it (a query of bare punctuation has nothing a word index could find)."""
    quoted = [_quote(term) for term in terms if has_word(term)]
    return " ".join(quoted) if quoted else None


def trigram_expression(terms: list[str]) -> str | None:
    """The same terms as literal substrings for the trigram index, or ``None`` when a term
    is too short for trigrams (it could then never match, so the retry is pointless)."""
    if not terms or any(len(term) < _TRIGRAM_MIN_CHARS for term in terms):
        return None
    return " ".join(_quote(term) for term in terms)

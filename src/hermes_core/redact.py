"""Redacting known secret shapes from text the model, the logs or a dataset will see.

A tool that prints an environment file or a config hands its secrets to the model, the
transcript store and the training data. Known key shapes are replaced by ``[REDACTED]``
(with the kind kept, so the model still understands what was there). Order matters:
``sk-ant-`` before the generic ``sk-``. ``token=``-style assignments are matched only as
whole words so counters such as ``tokens=1500`` survive.
"""

from __future__ import annotations

import re

__all__ = ["redact"]

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private key",
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL
        ),
    ),
    ("anthropic key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-.]{16,}")),
    ("api key", re.compile(r"\bsk-[A-Za-z0-9_\-.]{16,}")),
    (
        "github token",
        re.compile(r"\b(?:ghp|gho|ghs|ghr|ghu)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"),
    ),
    ("aws key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("slack token", re.compile(r"\bxox[bpas]-[A-Za-z0-9-]{10,}")),
    ("google key", re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}")),
    ("groq key", re.compile(r"\bgsk_[A-Za-z0-9]{20,}")),
    ("xai key", re.compile(r"\bxai-[A-Za-z0-9]{20,}")),
    ("tavily key", re.compile(r"\btvly-[A-Za-z0-9\-]{16,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer token", re.compile(r"(?i)\bBearer\s+[A-Za-z0-9_\-.=:/+]{12,}")),
    ("url credentials", re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)")),
)
_ASSIGNMENT = re.compile(
    r"(?i)\b((?:[A-Z0-9_]*_)?(?:api_?key|secret|password|passwd|token|access_key))"
    r"(\s*[=:]\s*)(['\"]?)([^\s'\"]{6,})\3"
)


_CANDIDATE = re.compile(
    r"-----BEGIN|sk-|gh[pousr]_|github_pat_|AKIA|ASIA|xox[bpas]-|AIza|gsk_|xai-|tvly-|eyJ"
    r"|bearer|://|api_?key|secret|passw|token|access_key",
    re.IGNORECASE,
)
"""A literal every pattern above needs (case folded, so a superset): text without one
skips the fourteen substitution passes, which matter for a large tool output."""


def redact(text: str) -> str:
    """``text`` with every known secret shape replaced by ``[REDACTED <kind>]``."""
    if not text or _CANDIDATE.search(text) is None:
        return text
    return redact_all_patterns(text)


def redact_all_patterns(text: str) -> str:
    """:func:`redact` without the quick pre-check (kept for tests that compare the two)."""
    for kind, pattern in _PATTERNS:
        text = pattern.sub(f"[REDACTED {kind}]", text)
    return _ASSIGNMENT.sub(
        lambda m: (
            f"{m.group(1)}{m.group(2)}{m.group(3)}[REDACTED]{m.group(3)}"
            if "REDACTED" not in m.group(4)
            else m.group(0)
        ),
        text,
    )

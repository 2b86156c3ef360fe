"""Known secret shapes are removed; ordinary text and counters survive."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_core.redact import redact, redact_all_patterns

SECRETS = [
    ("sk-ant-api03-" + "A" * 40, "anthropic key"),
    ("sk-proj-" + "b" * 40, "api key"),
    ("ghp_" + "c" * 36, "github token"),
    ("github_pat_" + "d" * 40, "github token"),
    ("AKIA" + "E" * 16, "aws key"),
    ("xoxb-" + "1" * 12 + "-abcdef", "slack token"),
    ("AIza" + "f" * 35, "google key"),
    ("gsk_" + "g" * 40, "groq key"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop", "jwt"),
]


@pytest.mark.parametrize(("secret", "kind"), SECRETS, ids=[k for _, k in SECRETS])
def test_each_shape_is_redacted(secret: str, kind: str) -> None:
    out = redact(f"value: {secret} end")
    assert secret not in out
    assert f"[REDACTED {kind}]" in out and out.endswith(" end")


def test_assignments_bearer_urls_and_pem_blocks() -> None:
    text = (
        "OPENAI_API_KEY=abc123def456\npassword: 'hunter2hunter2'\n"
        "Authorization: Bearer abcdefghijklmnopqrstu\n"
        "postgresql://admin:s3cretpass@db/x\n"
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"
    )
    out = redact(text)
    for leaked in ("abc123def456", "hunter2hunter2", "abcdefghijklmnopqrstu", "s3cretpass", "MIIE"):
        assert leaked not in out
    assert "postgresql://[REDACTED url credentials]@db/x" in out


def test_ordinary_text_and_counters_survive() -> None:
    text = "tokens=1500 max_tokens: 4096 the sk- prefix is short; see task-ant-x"
    assert redact(text) == text


_PIECES = [
    "sk-ant-api03-" + "A" * 20,
    "sk-" + "b" * 20,
    "ghp_" + "c" * 24,
    "github_pat_" + "d" * 24,
    "AKIA" + "E" * 16,
    "xoxb-" + "1" * 12,
    "AIza" + "f" * 32,
    "gsk_" + "g" * 24,
    "xai-" + "h" * 24,
    "tvly-" + "i" * 20,
    "eyJabcdefgh.ijklmnop.qrstuvwx",
    "Bearer abcdefghijklmnop",
    "https://user:pw@host/",
    "API_KEY=abcdefgh",
    "Password: 'hunter2hunter2'",
    "-----BEGIN RSA PRIVATE KEY-----\nxyz\n-----END RSA PRIVATE KEY-----",
    "tokens=1500",
    "plain words",
    " ",
    "\n",
    "=",
    ":",
]


@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=12), max_size=8))
def test_the_quick_pre_check_never_changes_the_result(parts: list[str]) -> None:
    text = "".join(parts)
    assert redact(text) == redact_all_patterns(text)

"""Known secret shapes are removed; ordinary text and counters survive."""

from __future__ import annotations

import pytest

from hermes_core.redact import redact

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

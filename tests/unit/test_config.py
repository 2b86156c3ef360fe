"""config.yaml and .env: defaults, interpolation, precise errors, unknown keys."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hermes_bootstrap.config import HermesConfig, interpolate, load_config, read_dotenv
from hermes_core.errors import ConfigError


def write(home: Path, text: str, env: str | None = None) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(text)
    if env is not None:
        (home / ".env").write_text(env)
    return home


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config == HermesConfig()
    assert config.database.backend == "sqlite" and config.agent.max_turns == 90


def test_values_and_interpolation_from_env_and_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PG_HOST", "db.internal")
    home = write(
        tmp_path,
        "model:\n  provider: openrouter\n  api_key: ${env:OR_KEY}\n"
        "database:\n  url: postgresql+asyncpg://u@${PG_HOST}/hermes\n"
        "  postgres:\n    pool_size: 20\n",
        env="# secrets\nexport OR_KEY='sk-or-123'\n",
    )
    config = load_config(home)
    assert config.model.provider == "openrouter"
    assert config.model.api_key == "sk-or-123"
    assert config.database.url == "postgresql+asyncpg://u@db.internal/hermes"
    assert config.database.postgres.pool_size == 20


def test_invalid_value_names_file_key_value_and_rule(tmp_path: Path) -> None:
    home = write(tmp_path, "database:\n  postgres:\n    pool_size: 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(home)
    message = str(info.value)
    assert str(home / "config.yaml") in message
    assert "database.postgres.pool_size = 0" in message
    assert "greater than or equal to 1" in message


def test_invalid_choice_lists_what_is_allowed(tmp_path: Path) -> None:
    home = write(tmp_path, "database:\n  backend: mongo\n")
    with pytest.raises(ConfigError, match=r"database.backend = 'mongo'.*'sqlite', 'postgres'"):
        load_config(home)


def test_broken_yaml_reports_the_line(tmp_path: Path) -> None:
    home = write(tmp_path, "model:\n  provider: [unclosed\n")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+"):
        load_config(home)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_unknown_keys_warn_but_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    home = write(tmp_path, "futuristic: 1\nmemory:\n  sparkle: true\n")
    with caplog.at_level(logging.WARNING, logger="hermes.config"):
        load_config(home)
    assert "'futuristic'" in caplog.text and "'memory.sparkle'" in caplog.text


def test_dotenv_parsing_and_interpolation_rules(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text('A=1\n# comment\nexport B="two words"\nbroken line\nC=\n')
    assert read_dotenv(env) == {"A": "1", "B": "two words", "C": ""}
    assert interpolate({"x": ["${A}", "${env:B}-${MISSING}"]}, {"A": "1", "B": "b"}) == {
        "x": ["1", "b-"]
    }

"""Provider profiles: credential order, the same-host rule, clear errors."""

from __future__ import annotations

import pytest

from hermes_adapters.llm.openai_chat import OpenAIChatModel
from hermes_adapters.llm.profiles import PROFILES, build_chat_model, resolve_api_key
from hermes_core.errors import ConfigError, ModelAuthError

REQUIRED = {
    "openai",
    "openrouter",
    "anthropic",
    "deepseek",
    "xai",
    "nous",
    "gemini",
    "groq",
    "together",
    "fireworks",
    "mistral",
    "huggingface",
    "nvidia",
    "alibaba",
    "zai",
    "kimi-coding",
    "minimax",
    "ollama",
    "lmstudio",
    "vllm",
    "custom",
}


def test_every_required_profile_exists() -> None:
    assert set(PROFILES) >= REQUIRED


def test_explicit_key_then_environment_then_dotenv() -> None:
    profile = PROFILES["openrouter"]
    url = profile.base_url
    env = {"OPENROUTER_API_KEY": "from-env"}
    dotenv = {"OPENROUTER_API_KEY": "from-dotenv"}
    kw = {"base_url": url, "environ": env, "dotenv": dotenv}
    assert resolve_api_key(profile, api_key="explicit", **kw) == "explicit"
    assert resolve_api_key(profile, api_key=None, **kw) == "from-env"
    assert resolve_api_key(profile, api_key=None, base_url=url, environ={}, dotenv=dotenv) == (
        "from-dotenv"
    )


def test_an_environment_key_is_never_sent_to_another_host() -> None:
    profile = PROFILES["openai"]
    with pytest.raises(ModelAuthError, match="only sent to their own provider"):
        resolve_api_key(
            profile,
            api_key=None,
            base_url="https://collector.example/v1",
            environ={"OPENAI_API_KEY": "sk-secret"},
            dotenv={},
        )


def test_missing_key_names_the_variables_to_set() -> None:
    with pytest.raises(ModelAuthError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        build_chat_model("gemini", "gemini-2.5-flash", environ={}, dotenv={})


def test_local_servers_need_no_key_and_custom_needs_a_url() -> None:
    model = build_chat_model("ollama", "llama3", environ={}, dotenv={})
    assert isinstance(model, OpenAIChatModel) and model.provider == "ollama"
    with pytest.raises(ConfigError, match="needs a base_url"):
        build_chat_model("custom", "m", environ={}, dotenv={})
    custom = build_chat_model("custom", "m", base_url="http://127.0.0.1:9/v1", environ={})
    assert custom.model_name == "m"


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"known providers: .*openrouter"):
        build_chat_model("acme", "m")

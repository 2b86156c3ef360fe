"""Provider profiles: a name users type, mapped to a wire format, an endpoint and a key.

Most hosted models speak one of three wire formats; what differs is the base URL, which
environment variable holds the key, a few headers, and reasoning quirks (DeepSeek and
Kimi need ``reasoning_content`` echoed on tool-call turns; OpenRouter takes
``reasoning_details`` back). A profile records exactly that, so adding an
OpenAI-compatible provider is one entry here, certified by the contract kit.

Credentials come from, in order: the explicit ``api_key``, the profile's environment
variables, then ``$HERMES_HOME/.env`` (passed in by the bootstrap). A key found in the
environment is only sent to the profile's own host: pointing a profile at another
``base_url`` needs an explicit key, so a stray setting cannot leak a credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from hermes_core.errors import ConfigError, ModelAuthError
from hermes_core.ports.llm import ChatModel

__all__ = ["PROFILES", "ApiMode", "ProviderProfile", "build_chat_model", "resolve_api_key"]

ApiMode = Literal["chat_completions", "anthropic_messages", "codex_responses"]
ReasoningEcho = Literal["none", "reasoning_content", "reasoning_details"]


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    name: str
    base_url: str
    api_mode: ApiMode = "chat_completions"
    key_env: tuple[str, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    reasoning_echo: ReasoningEcho = "none"
    needs_key: bool = True
    """Local servers (Ollama, LM Studio, vLLM) accept requests without a key."""


def _p(name: str, base_url: str, *keys: str, **kw: object) -> ProviderProfile:
    return ProviderProfile(name, base_url, key_env=keys, **kw)  # type: ignore[arg-type]


PROFILES: Mapping[str, ProviderProfile] = {
    p.name: p
    for p in (
        _p("openai", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        _p(
            "openai-responses",
            "https://api.openai.com/v1",
            "OPENAI_API_KEY",
            api_mode="codex_responses",
        ),
        _p(
            "openrouter",
            "https://openrouter.ai/api/v1",
            "OPENROUTER_API_KEY",
            reasoning_echo="reasoning_details",
            headers={"HTTP-Referer": "https://github.com/hermes-harness", "X-Title": "Hermes"},
        ),
        _p(
            "anthropic",
            "https://api.anthropic.com",
            "ANTHROPIC_API_KEY",
            api_mode="anthropic_messages",
        ),
        _p(
            "deepseek",
            "https://api.deepseek.com/v1",
            "DEEPSEEK_API_KEY",
            reasoning_echo="reasoning_content",
        ),
        _p("xai", "https://api.x.ai/v1", "XAI_API_KEY"),
        _p("nous", "https://inference-api.nousresearch.com/v1", "NOUS_API_KEY"),
        _p(
            "gemini",
            "https://generativelanguage.googleapis.com/v1beta/openai",
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
        ),
        _p("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        _p("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY"),
        _p("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
        _p("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
        _p("huggingface", "https://router.huggingface.co/v1", "HF_TOKEN", "HUGGINGFACE_API_KEY"),
        _p("nvidia", "https://integrate.api.nvidia.com/v1", "NVIDIA_API_KEY"),
        _p(
            "alibaba",
            "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
            "DASHSCOPE_API_KEY",
        ),
        _p("zai", "https://api.z.ai/api/paas/v4", "ZAI_API_KEY", "GLM_API_KEY"),
        _p(
            "kimi-coding",
            "https://api.kimi.com/coding/v1",
            "KIMI_API_KEY",
            reasoning_echo="reasoning_content",
        ),
        _p("minimax", "https://api.minimax.io/v1", "MINIMAX_API_KEY"),
        _p("ollama", "http://127.0.0.1:11434/v1", "OLLAMA_API_KEY", needs_key=False),
        _p("lmstudio", "http://127.0.0.1:1234/v1", "LMSTUDIO_API_KEY", needs_key=False),
        _p("vllm", "http://127.0.0.1:8000/v1", "VLLM_API_KEY", needs_key=False),
        _p("custom", "", "MODEL_API_KEY", needs_key=False),
    )
}


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def resolve_api_key(
    profile: ProviderProfile,
    *,
    api_key: str | None,
    base_url: str,
    environ: Mapping[str, str],
    dotenv: Mapping[str, str],
) -> str | None:
    """The key to send, following the documented order and the same-host rule.

    Raises:
        ModelAuthError: the profile needs a key and none applies; the message names the
            variables to set.
    """
    if api_key:
        return api_key
    same_host = profile.name == "custom" or _host(base_url) == _host(profile.base_url)
    if same_host:
        for source in (environ, dotenv):
            for name in profile.key_env:
                if source.get(name):
                    return source[name]
    if not profile.needs_key:
        return None
    if not same_host:
        raise ModelAuthError(
            f"provider {profile.name!r} points at {base_url}, not its own host "
            f"{_host(profile.base_url)}; pass api_key explicitly (environment keys are only "
            "sent to their own provider)",
            provider=profile.name,
        )
    names = " or ".join(profile.key_env)
    raise ModelAuthError(
        f"no API key for provider {profile.name!r}: set {names} in the environment or in "
        "$HERMES_HOME/.env, or pass api_key",
        provider=profile.name,
    )


def build_chat_model(
    provider: str,
    model: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    api_mode: ApiMode | None = None,
    environ: Mapping[str, str] | None = None,
    dotenv: Mapping[str, str] | None = None,
) -> ChatModel:
    """A ready adapter for ``provider`` (a profile name) and ``model``.

    Raises:
        ConfigError: unknown provider, or ``custom`` without a base URL.
        ModelAuthError: no key applies (see :func:`resolve_api_key`).
    """
    profile = PROFILES.get(provider)
    if profile is None:
        known = ", ".join(sorted(PROFILES))
        raise ConfigError(f"unknown provider {provider!r}; known providers: {known}")
    url = (base_url or profile.base_url).rstrip("/")
    if not url:
        raise ConfigError(f"provider {provider!r} needs a base_url (any OpenAI-compatible URL)")
    key = resolve_api_key(
        profile, api_key=api_key, base_url=url, environ=environ or {}, dotenv=dotenv or {}
    )
    mode = api_mode or profile.api_mode
    headers = dict(profile.headers)
    if mode == "anthropic_messages":
        from hermes_adapters.llm.anthropic_messages import AnthropicMessagesModel

        return AnthropicMessagesModel(
            model, base_url=url, api_key=key, provider=provider, headers=headers
        )
    if mode == "codex_responses":
        from hermes_adapters.llm.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel(
            model, base_url=url, api_key=key, provider=provider, headers=headers
        )
    from hermes_adapters.llm.openai_chat import OpenAIChatModel

    return OpenAIChatModel(
        model,
        base_url=url,
        api_key=key,
        provider=provider,
        headers=headers,
        reasoning_echo=profile.reasoning_echo,
    )

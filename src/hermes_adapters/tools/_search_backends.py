"""The search APIs behind ``web_search``: one small adapter per backend and the env lookup.

Each backend speaks one vendor's wire format and gives back the same :class:`SearchHit`s, so
the ``web_search`` tool (:mod:`hermes_adapters.tools.web`) never knows which API answered.
They live apart from the tool because they change for a different reason: a vendor moving a
field touches this module only, and adding a backend is a class and one registry line here.

These are fixed, user-chosen endpoints, so they use a plain ``httpx`` client passed in by the
tool, not the SSRF-guarded one ``web_extract`` needs for model-chosen URLs.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol

import httpx

from hermes_core.errors import ConfigError

__all__ = [
    "ENV_VARS",
    "SEARCH_BACKENDS",
    "BraveBackend",
    "ExaBackend",
    "FirecrawlBackend",
    "ParallelBackend",
    "SearchBackend",
    "SearchHit",
    "SearxngBackend",
    "TavilyBackend",
    "search_backend_from_env",
]

_TAGS = re.compile(r"<[^>]+>")


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result, the same whatever the backend."""

    title: str
    url: str
    description: str

    def as_dict(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url, "description": self.description}


class SearchBackend(Protocol):
    """A search API. ``search`` raises ``httpx.HTTPError`` or ``ValueError`` on failure."""

    name: str
    max_results: int

    async def search(
        self, client: httpx.AsyncClient, query: str, limit: int
    ) -> list[SearchHit]: ...


# -- reading a response ----------------------------------------------------------------

Snippet = Callable[[Mapping[str, Any]], object]
"""Where a backend keeps a hit's description inside one result object."""


class _BadPayload(ValueError):
    """The API answered 2xx with a body that is not its documented shape."""


def _json(response: httpx.Response) -> object:
    response.raise_for_status()
    try:
        return response.json()
    except ValueError as exc:
        raise _BadPayload("the response is not JSON") from exc


def _results(payload: object, *path: str) -> list[Mapping[str, Any]]:
    """``payload[path...]`` as a list of objects, or :class:`_BadPayload`."""
    node = payload
    for key in path:
        if not isinstance(node, Mapping):
            raise _BadPayload(f"expected an object at {key!r}")
        node = node.get(key)
    if node is None:
        return []
    if not isinstance(node, list):
        raise _BadPayload(f"expected a list at {'.'.join(path)}")
    return [item for item in node if isinstance(item, Mapping)]


def _plain(snippet: object) -> str:
    """A search snippet as plain text: some APIs mark matches up with ``<strong>``."""
    if not isinstance(snippet, str):
        return ""
    return " ".join(html.unescape(_TAGS.sub("", snippet)).split())


def _hit(item: Mapping[str, Any], snippet: object) -> SearchHit | None:
    url = item.get("url")
    if not isinstance(url, str) or not url:
        return None
    title = item.get("title")
    return SearchHit(title=_plain(title) or url, url=url, description=_plain(snippet))


def _hits(items: Sequence[Mapping[str, Any]], snippet: Snippet, limit: int) -> list[SearchHit]:
    """The first ``limit`` items with a URL, as hits described by ``snippet(item)``."""
    found = [_hit(item, snippet(item)) for item in items]
    return [hit for hit in found if hit is not None][:limit]


def _field(key: str) -> Snippet:
    """The snippet kept in one field of the result object."""
    return lambda item: item.get(key)


def _exa_snippet(item: Mapping[str, Any]) -> object:
    highlights = item.get("highlights")
    if isinstance(highlights, list) and highlights:
        return " … ".join(h for h in highlights if isinstance(h, str))
    return item.get("summary") or item.get("text")


def _excerpts(item: Mapping[str, Any]) -> str:
    excerpts = item.get("excerpts")
    if not isinstance(excerpts, list):
        return ""
    return " … ".join(e for e in excerpts if isinstance(e, str))[:1000]


# -- the backends ----------------------------------------------------------------------


class _Backend:
    """What every backend declares: its name, the variable holding its setting, its cap."""

    name: str
    env_var: ClassVar[str]
    max_results: int


class _KeyedBackend(_Backend):
    """A hosted API: built from an API key, at a base URL that tests and proxies may change."""

    default_base_url: ClassVar[str]

    def __init__(self, api_key: str, *, base_url: str | None = None) -> None:
        self._key = api_key
        self._base = (self.default_base_url if base_url is None else base_url).rstrip("/")


class TavilyBackend(_KeyedBackend):
    """Tavily: ``POST /search`` with a bearer key; hits in ``results[].{title,url,content}``."""

    name = "tavily"
    env_var = "TAVILY_API_KEY"
    max_results = 20
    default_base_url = "https://api.tavily.com"

    async def search(self, client: httpx.AsyncClient, query: str, limit: int) -> list[SearchHit]:
        response = await client.post(
            f"{self._base}/search",
            headers={"Authorization": f"Bearer {self._key}"},
            json={"query": query, "max_results": limit, "search_depth": "basic"},
        )
        return _hits(_results(_json(response), "results"), _field("content"), limit)


class BraveBackend(_KeyedBackend):
    """Brave Search: ``GET /res/v1/web/search?q=&count=``; hits in ``web.results[]``."""

    name = "brave"
    env_var = "BRAVE_API_KEY"
    max_results = 20
    default_base_url = "https://api.search.brave.com"

    async def search(self, client: httpx.AsyncClient, query: str, limit: int) -> list[SearchHit]:
        response = await client.get(
            f"{self._base}/res/v1/web/search",
            params={"q": query, "count": limit},
            headers={"X-Subscription-Token": self._key, "Accept": "application/json"},
        )
        return _hits(_results(_json(response), "web", "results"), _field("description"), limit)


class SearxngBackend(_Backend):
    """A SearXNG instance: ``GET /search?q=&format=json`` (JSON output must be enabled)."""

    name = "searxng"
    env_var = "SEARXNG_URL"
    max_results = 50

    def __init__(self, base_url: str) -> None:
        self._base = base_url.rstrip("/")

    async def search(self, client: httpx.AsyncClient, query: str, limit: int) -> list[SearchHit]:
        response = await client.get(f"{self._base}/search", params={"q": query, "format": "json"})
        return _hits(_results(_json(response), "results"), _field("content"), limit)


class ExaBackend(_KeyedBackend):
    """Exa: ``POST /search`` with ``x-api-key``; text excerpts requested via ``contents``."""

    name = "exa"
    env_var = "EXA_API_KEY"
    max_results = 100
    default_base_url = "https://api.exa.ai"

    async def search(self, client: httpx.AsyncClient, query: str, limit: int) -> list[SearchHit]:
        response = await client.post(
            f"{self._base}/search",
            headers={"x-api-key": self._key},
            json={
                "query": query,
                "numResults": limit,
                "contents": {"text": {"maxCharacters": 500}},
            },
        )
        return _hits(_results(_json(response), "results"), _exa_snippet, limit)


class FirecrawlBackend(_KeyedBackend):
    """Firecrawl v2: ``POST /v2/search`` with a bearer key; hits in ``data.web[]``."""

    name = "firecrawl"
    env_var = "FIRECRAWL_API_KEY"
    max_results = 100
    default_base_url = "https://api.firecrawl.dev"

    async def search(self, client: httpx.AsyncClient, query: str, limit: int) -> list[SearchHit]:
        response = await client.post(
            f"{self._base}/v2/search",
            headers={"Authorization": f"Bearer {self._key}"},
            json={"query": query, "limit": limit},
        )
        return _hits(_results(_json(response), "data", "web"), _field("description"), limit)


class ParallelBackend(_KeyedBackend):
    """Parallel: ``POST /v1/search`` with ``x-api-key``; hits carry ``excerpts[]``.

    The API takes keyword ``search_queries`` (required, at most 200 characters each) and a
    natural-language ``objective``; the query serves as both. It documents no top-level
    result count, so the count is cut here.
    """

    name = "parallel"
    env_var = "PARALLEL_API_KEY"
    max_results = 20
    default_base_url = "https://api.parallel.ai"

    async def search(self, client: httpx.AsyncClient, query: str, limit: int) -> list[SearchHit]:
        response = await client.post(
            f"{self._base}/v1/search",
            headers={"x-api-key": self._key},
            json={"objective": query, "search_queries": [query[:200]], "mode": "basic"},
        )
        return _hits(_results(_json(response), "results"), _excerpts, limit)


# -- choosing one ----------------------------------------------------------------------

_BACKEND_TYPES: Final = (
    TavilyBackend,
    BraveBackend,
    SearxngBackend,
    ExaBackend,
    FirecrawlBackend,
    ParallelBackend,
)

SEARCH_BACKENDS: Final[dict[str, Callable[[str], SearchBackend]]] = {
    backend.name: backend for backend in _BACKEND_TYPES
}
"""Backend name → constructor from its one setting, in the order picked when none is named."""

ENV_VARS: Final[dict[str, str]] = {backend.name: backend.env_var for backend in _BACKEND_TYPES}
"""Backend name → the environment variable holding its setting (key or URL)."""


def search_backend_from_env(
    env: Mapping[str, str], backend: str | None = None
) -> SearchBackend | None:
    """The search backend ``env`` configures: the named one, else the first with a setting.

    Raises:
        ConfigError: ``backend`` is not a known name, or its variable is not set (a
            backend chosen on purpose that cannot work should say so, not vanish).
    """
    if backend is not None:
        name = backend.strip().lower()
        if name not in SEARCH_BACKENDS:
            known = ", ".join(SEARCH_BACKENDS)
            raise ConfigError(f"unknown web search backend {backend!r}; known: {known}")
        value = env.get(ENV_VARS[name], "").strip()
        if not value:
            raise ConfigError(f"web search backend {name!r} needs {ENV_VARS[name]} to be set")
        return SEARCH_BACKENDS[name](value)
    for name, make in SEARCH_BACKENDS.items():
        value = env.get(ENV_VARS[name], "").strip()
        if value:
            return make(value)
    return None

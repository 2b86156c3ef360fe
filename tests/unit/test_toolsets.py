"""Toolset resolution: the static table, composites, cycles, filtering and MCP toolsets."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_core import toolsets
from hermes_core.toolsets import (
    STATIC_TOOLSETS,
    Toolset,
    ToolsetSelection,
    is_broad_toolset,
    mcp_toolset,
    resolve_toolset,
    resolve_toolsets,
    toolset_names,
    toolset_of,
)

FILE_TOOLS = ["patch", "read_file", "search_files", "write_file"]
WEB_TOOLS = ["web_extract", "web_search"]


def test_dunder_all_is_sorted_and_exists() -> None:
    assert toolsets.__all__ == sorted(toolsets.__all__)
    assert all(hasattr(toolsets, name) for name in toolsets.__all__)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("web", WEB_TOOLS),
        ("search", ["web_search"]),
        ("vision", ["vision_analyze"]),
        ("image_gen", ["image_generate"]),
        ("terminal", ["process", "terminal"]),
        ("file", FILE_TOOLS),
        ("skills", ["skill_manage", "skill_view", "skills_list"]),
        ("todo", ["todo"]),
        ("memory", ["memory"]),
        ("session_search", ["session_search"]),
        ("clarify", ["clarify"]),
        ("delegation", ["delegate_task"]),
        ("tts", ["text_to_speech"]),
        ("code_execution", ["execute_code"]),
    ],
)
def test_leaf_toolsets_resolve_to_their_tools(name: str, expected: list[str]) -> None:
    assert resolve_toolset(name) == expected


def test_browser_has_twelve_browser_tools_and_web_search() -> None:
    tools = resolve_toolset("browser")
    browser = [t for t in tools if t.startswith("browser_")]
    assert len(browser) == 12
    assert set(tools) == {*browser, "web_search"}


def test_static_table_is_read_only_and_names_match_keys() -> None:
    assert all(key == ts.name for key, ts in STATIC_TOOLSETS.items())
    with pytest.raises(TypeError):
        STATIC_TOOLSETS["web"] = Toolset("web", "", ())  # type: ignore[index]


def test_every_static_include_names_a_static_toolset() -> None:
    for ts in STATIC_TOOLSETS.values():
        assert set(ts.includes) <= set(STATIC_TOOLSETS), ts.name


def test_debugging_expands_includes() -> None:
    assert resolve_toolset("debugging") == sorted(["process", "terminal", *WEB_TOOLS, *FILE_TOOLS])


def test_safe_is_only_includes() -> None:
    assert STATIC_TOOLSETS["safe"].tools == ()
    assert resolve_toolset("safe") == sorted([*WEB_TOOLS, "vision_analyze", "image_generate"])


def test_coding_posture() -> None:
    coding = STATIC_TOOLSETS["coding"]
    assert coding.posture
    tools = set(resolve_toolset("coding"))
    assert len(tools) == 29  # 2 web + 2 terminal + 4 file + 1 + 3 skills + 12 + 5
    for leaf in ("web", "terminal", "file", "vision", "skills", "browser", "todo", "memory"):
        assert set(resolve_toolset(leaf)) <= tools, leaf
    for leaf in ("session_search", "clarify", "delegation"):
        assert set(resolve_toolset(leaf)) <= tools, leaf
    assert not {"image_generate", "text_to_speech", "execute_code"} & tools


def test_hermes_cli_is_coding_plus_extras() -> None:
    assert set(resolve_toolset("hermes-cli")) == set(resolve_toolset("coding")) | {
        "image_generate",
        "text_to_speech",
        "execute_code",
    }


def test_resolution_is_sorted_and_unique() -> None:
    # browser and web both list web_search, and "alpha" is listed twice.
    dynamic = {"both": Toolset("both", "", ("zeta", "alpha", "alpha"), ("browser", "web"))}
    tools = resolve_toolset("both", dynamic)
    assert tools == sorted(set(tools))
    assert tools.count("web_search") == 1


def test_unknown_toolset_resolves_to_nothing() -> None:
    assert resolve_toolset("no-such-toolset") == []


def test_all_and_star_mean_every_toolset() -> None:
    dynamic = mcp_toolset("github", ["mcp__github__issues"])
    every: set[str] = set()
    for ts in (*STATIC_TOOLSETS.values(), *dynamic.values()):
        every.update(ts.tools)
    assert resolve_toolset("all", dynamic) == sorted(every)
    assert resolve_toolset("*", dynamic) == sorted(every)
    assert "mcp__github__issues" not in resolve_toolset("all")


def test_cycle_terminates() -> None:
    dynamic = {
        "a": Toolset("a", "", ("ta",), ("b",)),
        "b": Toolset("b", "", ("tb",), ("a",)),
    }
    assert resolve_toolset("a", dynamic) == ["ta", "tb"]
    assert resolve_toolset("b", dynamic) == ["ta", "tb"]


def test_self_include_terminates() -> None:
    dynamic = {"me": Toolset("me", "", ("t",), ("me",))}
    assert resolve_toolset("me", dynamic) == ["t"]


def test_diamond_counts_shared_tools_once() -> None:
    dynamic = {
        "top": Toolset("top", "", (), ("left", "right")),
        "left": Toolset("left", "", ("l",), ("bottom",)),
        "right": Toolset("right", "", ("r",), ("bottom",)),
        "bottom": Toolset("bottom", "", ("b",)),
    }
    assert resolve_toolset("top", dynamic) == ["b", "l", "r"]


def test_include_of_all_terminates() -> None:
    dynamic = {"greedy": Toolset("greedy", "", ("g",), ("all",))}
    assert set(resolve_toolset("greedy", dynamic)) == set(resolve_toolset("all", dynamic))


def test_dynamic_can_include_static_and_static_wins_a_name_clash() -> None:
    dynamic = {
        "mine": Toolset("mine", "", ("x",), ("file",)),
        "web": Toolset("web", "hijack", ("evil",)),
    }
    assert resolve_toolset("mine", dynamic) == sorted(["x", *FILE_TOOLS])
    assert resolve_toolset("web", dynamic) == WEB_TOOLS


def test_toolset_names_lists_static_and_dynamic() -> None:
    names = toolset_names({"extra": Toolset("extra", "", ())})
    assert names == sorted(names)
    assert "extra" in names
    assert set(STATIC_TOOLSETS) <= set(names)
    assert "all" not in names


# --- resolve_toolsets -----------------------------------------------------------------


def test_enabled_none_means_everything() -> None:
    selection = resolve_toolsets(None)
    assert selection == ToolsetSelection(tools=tuple(resolve_toolset("all")), unknown=())


def test_enabled_union() -> None:
    selection = resolve_toolsets(["file", "terminal"])
    assert selection.tools == tuple(sorted([*FILE_TOOLS, "process", "terminal"]))
    assert selection.unknown == ()


def test_enabled_empty_means_nothing() -> None:
    assert resolve_toolsets([]).tools == ()


def test_disabled_narrow_toolset_removes_all_its_tools() -> None:
    selection = resolve_toolsets(["debugging"], ["web"])
    assert selection.tools == tuple(sorted([*FILE_TOOLS, "process", "terminal"]))
    # disabling wins over an explicit enable
    assert resolve_toolsets(["web", "file"], ["web"]).tools == tuple(FILE_TOOLS)


def test_disabled_from_everything() -> None:
    tools = resolve_toolsets(None, ["browser", "tts"]).tools
    assert "web_search" not in tools
    assert "text_to_speech" not in tools
    assert "web_extract" in tools


def test_disabled_posture_keeps_explicitly_enabled_narrow_tools() -> None:
    selection = resolve_toolsets(["file", "terminal", "hermes-cli"], ["coding"])
    extras = ["image_generate", "text_to_speech", "execute_code"]
    assert selection.tools == tuple(sorted([*FILE_TOOLS, "process", "terminal", *extras]))


def test_disabled_hermes_toolset_keeps_core() -> None:
    selection = resolve_toolsets(["memory", "coding"], ["hermes-cli"])
    assert selection.tools == ("memory",)


def test_disabled_broad_with_nothing_explicit_removes_everything_it_grants() -> None:
    tools = set(resolve_toolsets(None, ["coding"]).tools)
    assert not tools & set(resolve_toolset("coding"))
    assert {"image_generate", "text_to_speech", "execute_code"} <= tools


def test_disabled_all_keeps_only_explicit_narrow_tools() -> None:
    assert resolve_toolsets(["file", "coding"], ["all"]).tools == tuple(FILE_TOOLS)


def test_is_broad_toolset() -> None:
    assert is_broad_toolset("coding")
    assert is_broad_toolset("hermes-cli")
    assert is_broad_toolset("hermes-anything")
    assert is_broad_toolset("all")
    assert is_broad_toolset("*")
    assert not is_broad_toolset("file")
    assert not is_broad_toolset("unknown")
    assert is_broad_toolset("p", {"p": Toolset("p", "", (), posture=True)})


def test_unknown_names_are_reported_once_in_order() -> None:
    selection = resolve_toolsets(["file", "nope", "zz", "nope"], ["gone", "zz", "web"])
    assert selection.tools == tuple(FILE_TOOLS)
    assert selection.unknown == ("nope", "zz", "gone")


def test_known_pseudo_and_dynamic_names_are_not_unknown() -> None:
    dynamic = mcp_toolset("fs", ["mcp__fs__read"])
    selection = resolve_toolsets(["*", "fs", "mcp-fs"], ["all"], dynamic)
    assert selection.unknown == ()


# --- MCP toolsets ---------------------------------------------------------------------


def test_mcp_toolset_and_alias() -> None:
    dynamic = mcp_toolset("github", ["mcp__github__b", "mcp__github__a", "mcp__github__b"])
    assert set(dynamic) == {"mcp-github", "github"}
    assert dynamic["mcp-github"].name == "mcp-github"
    assert dynamic["github"].name == "github"
    assert dynamic["mcp-github"].tools == ("mcp__github__b", "mcp__github__a")
    expected = ["mcp__github__a", "mcp__github__b"]
    assert resolve_toolset("mcp-github", dynamic) == expected
    assert resolve_toolset("github", dynamic) == expected
    assert resolve_toolsets(["github"], dynamic=dynamic).tools == tuple(expected)


@pytest.mark.parametrize("server", ["web", "file", "coding", "all", "*"])
def test_mcp_alias_never_shadows_a_static_or_pseudo_name(server: str) -> None:
    dynamic = mcp_toolset(server, ["mcp__x__t"])
    assert set(dynamic) == {f"mcp-{server}"}


def test_mcp_toolset_rejects_empty_name() -> None:
    with pytest.raises(ValueError, match="empty"):
        mcp_toolset("", [])


def test_toolset_of() -> None:
    assert toolset_of("read_file") == ["coding", "debugging", "file", "hermes-cli"]
    assert "browser" in toolset_of("web_search")
    assert toolset_of("no_such_tool") == []
    dynamic = mcp_toolset("gh", ["mcp__gh__x"])
    assert toolset_of("mcp__gh__x", dynamic) == ["gh", "mcp-gh"]


# --- property: resolution equals an independent BFS ------------------------------------

_NAMES = [f"ts{i}" for i in range(8)]
_TOOLS = [f"tool{i}" for i in range(10)]


@st.composite
def _graphs(draw: st.DrawFn) -> dict[str, Toolset]:
    names = draw(st.lists(st.sampled_from(_NAMES), unique=True, min_size=1))
    # includes may name missing toolsets (ts7 when absent) and form arbitrary cycles
    return {
        name: Toolset(
            name,
            "",
            tuple(draw(st.lists(st.sampled_from(_TOOLS), max_size=4))),
            tuple(draw(st.lists(st.sampled_from(_NAMES), max_size=4))),
        )
        for name in names
    }


def _bfs(start: str, graph: Mapping[str, Toolset]) -> set[str]:
    seen = {start}
    queue = deque([start])
    tools: set[str] = set()
    while queue:
        node = graph.get(queue.popleft())
        if node is None:
            continue
        tools.update(node.tools)
        for child in node.includes:
            if child not in seen:
                seen.add(child)
                queue.append(child)
    return tools


@given(_graphs(), st.sampled_from(_NAMES))
def test_resolve_matches_bfs_on_random_graphs(graph: dict[str, Toolset], start: str) -> None:
    resolved = resolve_toolset(start, graph)
    assert resolved == sorted(_bfs(start, graph))
    assert resolve_toolsets([start], dynamic=graph).tools == tuple(resolved)

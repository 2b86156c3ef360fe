"""``ToolContract``: the behaviour every tool must show, as an abstract pytest class.

Subclass it once per tool and provide three fixtures: ``tool``, ``valid_args`` and
``invalid_args``. A tool that passes can be handed to any agent: its schema is valid for
every provider, bad arguments come back as an error result (never an exception), and a
cancelled call stops instead of swallowing the cancellation.

The ``anyio_backend`` fixture must be available (``tests/conftest.py`` provides it).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import anyio
import pytest

from hermes_core.ports.tools import Tool, ToolContext, ToolResult

__all__ = ["ToolContract"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _context() -> ToolContext:
    return ToolContext(task_id="contract", tool_call_id="call_contract")


class ToolContract:
    """Abstract contract; subclasses provide the fixtures below."""

    @pytest.fixture
    def tool(self) -> Tool:
        raise NotImplementedError("provide a `tool` fixture returning the tool under test")

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        raise NotImplementedError("provide `valid_args`: arguments the tool accepts")

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        raise NotImplementedError("provide `invalid_args`: arguments it must reject")

    @pytest.fixture
    def slow_args(self) -> dict[str, Any] | None:
        """Arguments that keep the tool busy for seconds (to prove cancellation), if any."""
        return None

    def test_spec_is_a_valid_function_schema(self, tool: Tool) -> None:
        spec = tool.spec
        assert _NAME.match(spec.name), f"tool name {spec.name!r} is not provider-safe"
        assert spec.description.strip(), "a tool needs a description the model can read"
        params = dict(spec.parameters)
        assert params.get("type") == "object", "parameters must be a JSON-schema object"
        properties = params.get("properties", {})
        assert isinstance(properties, dict)
        for key in params.get("required", []):
            assert key in properties, f"required argument {key!r} is not a declared property"
        schema = spec.function_schema()
        assert schema["type"] == "function" and schema["function"]["name"] == spec.name

    def test_handler_and_availability_are_async(self, tool: Tool) -> None:
        assert inspect.iscoroutinefunction(type(tool).__call__)
        assert inspect.iscoroutinefunction(type(tool).available)

    @pytest.mark.anyio
    async def test_available_answers_a_bool(self, tool: Tool) -> None:
        assert isinstance(await tool.available(), bool)

    @pytest.mark.anyio
    async def test_valid_arguments_give_a_result(
        self, tool: Tool, valid_args: dict[str, Any]
    ) -> None:
        result = await tool(dict(valid_args), _context())
        assert isinstance(result, ToolResult)
        assert isinstance(result.content, str)

    @pytest.mark.anyio
    async def test_bad_arguments_give_an_error_result_not_an_exception(
        self, tool: Tool, invalid_args: list[dict[str, Any]]
    ) -> None:
        assert invalid_args, "list at least one invalid argument set"
        for args in invalid_args:
            result = await tool(dict(args), _context())
            assert isinstance(result, ToolResult)
            assert result.is_error, f"{args!r} was accepted; expected an error result"

    @pytest.mark.anyio
    async def test_cancellation_is_not_swallowed(
        self, tool: Tool, valid_args: dict[str, Any], slow_args: dict[str, Any] | None
    ) -> None:
        args = slow_args if slow_args is not None else valid_args
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                scope.cancel()
                await tool(dict(args), _context())
                await anyio.lowlevel.checkpoint()
            assert scope.cancelled_caught
            if slow_args is not None:
                with anyio.move_on_after(0.2) as timer:
                    await tool(dict(slow_args), _context())
                assert timer.cancelled_caught, "a slow call did not stop when cancelled"

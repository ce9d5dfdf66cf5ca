"""Tool naming and schemas per docs/design.md#the-tool-loop, and the cache invalidation signal."""
import pytest

from agents_app.mcp import tool_cache
from agents_app.runtime.mcp_tool import EMPTY_PARAMETERS, parameters_normalise
from agents_app.runtime.tool_names import tool_name_normalise, tool_name_unique


def test_names_are_lower_case_safe_and_at_most_64_characters():
    assert tool_name_normalise("Campus Data.API__Get-Score") == "campus_data_api__get-score"
    long_a = tool_name_normalise("service__" + "a" * 80)
    long_b = tool_name_normalise("service__" + "a" * 79 + "b")
    assert len(long_a) == len(long_b) == 64 and long_a != long_b
    assert set(long_a) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-")


def test_unique_names_get_a_suffix_within_the_limit():
    taken: set[str] = set()
    name = "x" * 64
    assert [tool_name_unique(name, taken) for _ in range(3)] == [name, "x" * 62 + "_2", "x" * 62 + "_3"]


@pytest.mark.parametrize("schema", [None, {"type": "string"}, [], {"properties": {"a": {}}}])
def test_non_object_schemas_become_an_empty_object_schema(schema):
    assert parameters_normalise(schema) == EMPTY_PARAMETERS


def test_object_schema_is_kept_and_gets_properties():
    assert parameters_normalise({"type": "object", "required": []}) == {"type": "object", "required": [],
                                                                         "properties": {}}


@pytest.mark.django_db
def test_saving_or_deleting_a_service_drops_its_cached_tool_list(mcp_service_stdio):
    info = tool_cache.McpToolInfo(name="add", description="d", input_schema=None)
    tool_cache.mcp_tools_remember(mcp_service_stdio, [info])
    assert tool_cache.mcp_tools_cached(mcp_service_stdio) == [info]
    mcp_service_stdio.save()
    assert mcp_service_stdio.pk not in tool_cache._tool_lists
    tool_cache.mcp_tools_remember(mcp_service_stdio, [info])
    pk = mcp_service_stdio.pk
    mcp_service_stdio.delete()
    assert pk not in tool_cache._tool_lists

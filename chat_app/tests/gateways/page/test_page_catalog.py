"""The page's tool labels use the runtime's own naming rule (agents_app/runtime/tool_names.py),
so a chip finds its label whatever the sub-agent is called."""
import pytest
from asgiref.sync import async_to_sync

from agents_app.access import EVERYONE
from agents_app.runtime.tools import tools_for_agent
from chat_app.gateways.catalog import tool_labels

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["course-select", "a" + "-b" * 31])  # the second: 63 characters
def test_each_sub_agent_tool_the_model_sees_has_its_label(name, agent_factory, sub_agent_factory):
    sub_agent = sub_agent_factory(name=name, display_name="选课助手")
    agent = agent_factory(sub_agents=[sub_agent])
    [tool] = async_to_sync(tools_for_agent)(agent, audience=EVERYONE)
    assert tool_labels(audience=EVERYONE)["names"][tool.name] == "选课助手"

"""Migration 0015: texts admin stored with a browser's CRLF (before issue 42) are read by the model
with LF, as admin now saves them (campus_agent.base.admin_text)."""
import pytest

from testkit.migrations import migrate_to, migrate_to_newest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

BEFORE = [("agents_app", "0014_mcpservice_oauth_origins")]
AFTER = [("agents_app", "0015_text_line_endings")]



def test_crlf_texts_are_stored_with_lf():
    old_apps = migrate_to(BEFORE)
    try:
        agent = old_apps.get_model("agents_app", "Agent").objects.create(
            slug="xiaozhi", name="校园小智", system_prompt="你是校园小智。\r\n回答要简短。\r不知道就说不知道。")
        sub_agent = old_apps.get_model("subagents_app", "SubAgent").objects.create(
            name="canteen", description="食堂助手：\r\n菜单。", example_questions="今天吃啥\r\n二食堂几点开门",
            base_url="http://canteen-agent:8000")

        new_apps = migrate_to(AFTER)
        agent = new_apps.get_model("agents_app", "Agent").objects.get(pk=agent.pk)
        sub_agent = new_apps.get_model("subagents_app", "SubAgent").objects.get(pk=sub_agent.pk)
        assert agent.system_prompt == "你是校园小智。\n回答要简短。\n不知道就说不知道。"
        assert (sub_agent.description, sub_agent.example_questions) == ("食堂助手：\n菜单。", "今天吃啥\n二食堂几点开门")
    finally:
        migrate_to_newest()

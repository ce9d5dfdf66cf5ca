"""A group's own quota and message rate (chat_app.runs.group_limits, issue 43): a group without a
value counts as the global setting, the most generous of a user's groups wins; over the live
server, a group's rate and quota refuse (or let on) where the global ones would not."""
import pytest
from django.contrib.auth.models import Group

from chat_app.models import GroupLimits
from chat_app.runs.group_limits import UserLimits, caller_standing, user_limits
from chat_app.runs.quota import MSG_QUOTA_EXCEEDED, QUOTA_EXCEEDED
from testkit.web.sse import chat

pytestmark = pytest.mark.embedded

SPENT = {"prompt_tokens": 20, "completion_tokens": 15, "total_tokens": 35}


def _group(name: str, user, **limits) -> Group:
    group = Group.objects.create(name=name)
    group.user_set.add(user)
    if limits:
        GroupLimits.objects.create(group=group, **limits)
    return group


@pytest.mark.django_db
@pytest.mark.parametrize(("groups", "expected"), [
    ([], UserLimits(daily_token_quota=50, chat_rate_per_minute=20)),  # in no group: the global ones
    ([{}], UserLimits(50, 20)),  # a group without limits counts as the global settings
    ([{"daily_token_quota": 1000}], UserLimits(1000, 20)),
    ([{"daily_token_quota": 10, "chat_rate_per_minute": 2}], UserLimits(10, 2)),  # stricter than global
    ([{"daily_token_quota": 10}, {}], UserLimits(50, 20)),  # the other group gives the global: more
    ([{"daily_token_quota": 100}, {"daily_token_quota": 500}], UserLimits(500, 20)),
    ([{"daily_token_quota": 100}, {"daily_token_quota": 0}], UserLimits(0, 20)),  # 0: no quota at all
    ([{"chat_rate_per_minute": 5}, {"chat_rate_per_minute": 60}], UserLimits(50, 60)),
])
def test_the_most_generous_of_the_users_groups_wins(groups, expected, user, settings, django_assert_num_queries):
    settings.USER_DAILY_TOKEN_QUOTA, settings.CHAT_RATE_PER_MINUTE = 50, 20
    ids = {_group(f"组{i}", user, **limits).pk for i, limits in enumerate(groups)}
    with django_assert_num_queries(1):  # the groups, their limits joined: what admission reads
        audience, limits = caller_standing(user=user)
    assert limits == expected == user_limits(user_id=user.pk)
    assert audience.group_ids == ids


@pytest.mark.django_db(transaction=True)
def test_a_groups_rate_applies_to_its_members_only(live_asgi, llm_settings, agent, user, auth_headers, other_user,
                                                   token_for, settings):
    settings.CHAT_RATE_PER_MINUTE = 20
    _group("访客", user, chat_rate_per_minute=1)
    llm_settings.responder = lambda request: "好"
    assert chat(live_asgi, {"message": "一"}, headers=auth_headers).status == 200
    second = chat(live_asgi, {"message": "二"}, headers=auth_headers)
    assert second.status == 429 and second.body_json["code"] == 42902
    other = {"Authorization": f"Bearer {token_for(other_user)}"}
    assert [chat(live_asgi, {"message": m}, headers=other).status for m in "一二"] == [200, 200]


@pytest.mark.django_db(transaction=True)
def test_a_groups_quota_applies_with_the_global_one_off_and_a_generous_group_lifts_it(
        live_asgi, settings, llm_settings, agent, user, auth_headers):
    assert settings.USER_DAILY_TOKEN_QUOTA == 0  # off: only the group's quota limits
    _group("本科生", user, daily_token_quota=30)
    llm_settings.reply_text("一食堂有红烧肉。", usage=SPENT)
    assert chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers).status == 200
    refused = chat(live_asgi, {"message": "再问一个"}, headers=auth_headers)
    assert refused.status == 429
    assert refused.body_json == {"code": QUOTA_EXCEEDED, "message": MSG_QUOTA_EXCEEDED.format(quota=30)}

    _group("助教", user, daily_token_quota=1000)  # the most generous of their groups wins
    llm_settings.reply_text("好的", usage=SPENT)
    assert chat(live_asgi, {"message": "继续"}, headers=auth_headers).status == 200


@pytest.mark.django_db
def test_staff_set_a_groups_limits_in_admin(staff_client):
    from django.urls import reverse

    group = Group.objects.create(name="教职工")
    page = staff_client.get(reverse("admin:chat_app_grouplimits_add"))
    assert page.status_code == 200 and "留空 = 跟随全局设置" in page.content.decode()
    response = staff_client.post(reverse("admin:chat_app_grouplimits_add"),
                                 {"group": group.pk, "daily_token_quota": "200000", "chat_rate_per_minute": ""})
    assert response.status_code == 302
    limits = GroupLimits.objects.get(group=group)
    assert (limits.daily_token_quota, limits.chat_rate_per_minute) == (200000, None)

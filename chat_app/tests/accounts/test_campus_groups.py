"""Groups from the campus (chat_app/accounts/campus_groups.py): the group mapping applied at every
CAS login (the real CAS server on loopback) and OIDC login (the loopback provider), memberships
it gave set to what it says now, hand-given ones kept; shown per user in admin."""

import httpx
import pytest
from django.contrib.auth.models import Group

from chat_app.accounts.campus_groups import campus_attributes_kept
from chat_app.models import CampusGroupGrant, CampusIdentity, GroupMapping
from testkit.cas.server import ACCOUNT

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def groups(db):
    names = ("本科生", "研究生", "图书馆志愿者", "学生")
    return {name: Group.objects.create(name=name) for name in names}


@pytest.fixture
def mapping(groups):
    GroupMapping.objects.create(source="cas", attribute="userType", value="本科生", group=groups["本科生"])
    GroupMapping.objects.create(source="cas", attribute="userType", value="研究生", group=groups["研究生"])
    GroupMapping.objects.create(source="oidc", attribute="roles", value="student", group=groups["学生"])


def _cas_login(live_asgi, cas) -> None:
    with httpx.Client(base_url=live_asgi, timeout=15) as browser:
        start = browser.get("/accounts/cas/login/")
        service = httpx.URL(start.headers["location"]).params["service"]
        assert browser.get(cas.sign_in(browser, service=service)).status_code == 302


def _names(user) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def test_the_mapping_follows_the_campus_and_keeps_hand_given_groups(live_asgi, cas_settings, mapping, groups):
    _cas_login(live_asgi, cas_settings)
    user = CampusIdentity.objects.get(source="cas", sub=ACCOUNT).user
    assert _names(user) == {"本科生"}

    user.groups.add(groups["图书馆志愿者"])  # staff, by hand in admin
    cas_settings.attributes_set(userType="研究生")  # graduated; now a 研究生 in the campus directory
    _cas_login(live_asgi, cas_settings)
    assert _names(user) == {"研究生", "图书馆志愿者"}
    assert set(CampusGroupGrant.objects.filter(user=user).values_list("group__name", flat=True)) == {"研究生"}

    cas_settings.attributes_set(userType="教职工")  # no rule: the mapped group goes, the hand-given one stays
    _cas_login(live_asgi, cas_settings)
    assert _names(user) == {"图书馆志愿者"}


def test_a_group_held_by_hand_stays_when_the_mapping_stops_giving_it(live_asgi, cas_settings, mapping, groups):
    _cas_login(live_asgi, cas_settings)
    user = CampusIdentity.objects.get(source="cas").user
    user.groups.clear()
    CampusGroupGrant.objects.all().delete()
    user.groups.add(groups["本科生"])  # given by hand, and the campus says 本科生 as well
    _cas_login(live_asgi, cas_settings)
    cas_settings.attributes_set(userType="研究生")
    _cas_login(live_asgi, cas_settings)
    assert _names(user) == {"本科生", "研究生"}


def test_oidc_claims_map_too(live_asgi, oidc_settings, mapping):
    with httpx.Client(base_url=live_asgi, timeout=15) as browser:
        start = browser.get("/login/campus/")
        at_provider = httpx.get(start.headers["location"], timeout=10)
        assert browser.get(at_provider.headers["location"]).status_code == 302
    user = CampusIdentity.objects.get(source="oidc").user
    assert _names(user) == {"学生"}  # the provider's account has roles ["student"]

    oidc_settings.account.roles = ["alumni"]
    with httpx.Client(base_url=live_asgi, timeout=15) as browser:
        start = browser.get("/login/campus/")
        at_provider = httpx.get(start.headers["location"], timeout=10)
        browser.get(at_provider.headers["location"])
    assert _names(user) == set()


def test_admin_shows_each_users_groups_and_where_they_came_from(live_asgi, cas_settings, mapping, groups, admin_client):
    _cas_login(live_asgi, cas_settings)
    identity = CampusIdentity.objects.get(source="cas")
    identity.user.groups.add(groups["图书馆志愿者"])
    page = admin_client.get(f"/admin/chat_app/campusidentity/{identity.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "本科生（校园映射）" in text and "图书馆志愿者（手工指定）" in text
    assert admin_client.get("/admin/chat_app/groupmapping/add/").status_code == 200
    grants = admin_client.get("/admin/chat_app/campusgroupgrant/", {"q": identity.user.username})
    assert grants.status_code == 200 and "本科生" in grants.content.decode()


def test_attributes_are_kept_as_capped_lists_of_strings():
    kept = campus_attributes_kept(
        {
            "userType": "本科生",
            "memberOf": ["a", "b", {"x": 1}],
            "n": 3,
            "ok": True,
            "nested": {"a": 1},
            "long": "x" * 500,
            "": "empty key",
            **{f"k{i}": "v" for i in range(100)},
        }
    )
    assert kept["userType"] == ["本科生"] and kept["memberOf"] == ["a", "b"]
    assert kept["n"] == ["3"] and kept["ok"] == ["true"] and "nested" not in kept and "" not in kept
    assert len(kept["long"][0]) == 200 and len(kept) == 60

"""Groups from the campus (docs/design.md#campus-identity-and-audit): at every campus login the
group mapping (GroupMapping, edited in admin) decides which groups the person's CAS attributes or
OIDC claims put them in.

A membership the mapping gives is marked (CampusGroupGrant); at the next login the marked ones
are set to exactly what the rules give now (a student who graduates leaves 本科生), and
memberships staff gave by hand, which carry no mark, are kept whatever the rules say.
"""

from django.db import transaction
from loguru import logger

from chat_app.models import CampusGroupGrant, GroupMapping

ATTRIBUTES_MAX = 60  # attributes (claims) kept per login
VALUES_MAX = 30  # values kept per attribute
KEY_MAX = 100
VALUE_MAX = 200


def campus_attributes_kept(raw) -> dict[str, list[str]]:
    """What a CAS server or an OIDC provider said about the person, as {name: [values]}: strings,
    numbers and booleans become strings, lists are kept value by value, anything else (nested
    objects, a token) is dropped; capped in count and length, for the database and for admin."""
    kept: dict[str, list[str]] = {}
    if not isinstance(raw, dict):
        return kept
    for key, value in raw.items():
        if len(kept) >= ATTRIBUTES_MAX:
            break
        if not isinstance(key, str) or not key or len(key) > KEY_MAX:
            continue
        values = value if isinstance(value, list) else [value]
        strings = [_scalar(item) for item in values[:VALUES_MAX]]
        strings = [item[:VALUE_MAX] for item in strings if item is not None]
        if strings:
            kept[key] = strings
    return kept


def _scalar(value) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def campus_groups_apply(*, user, source: str, attributes: dict[str, list[str]]) -> None:
    """Puts `user` in the groups the `source` rules give for `attributes`, and out of the groups
    an earlier login's rules gave that the rules give no more; hand-given groups stay."""
    wanted = {
        rule.group_id
        for rule in GroupMapping.objects.filter(source=source)
        if rule.value in attributes.get(rule.attribute, ())
    }
    with transaction.atomic():
        granted = set(CampusGroupGrant.objects.filter(user=user).values_list("group_id", flat=True))
        held = set(user.groups.values_list("id", flat=True))
        dropped = granted - wanted
        # A group the person already holds by hand stays hand-given: no mark, so no rule takes it back.
        added = wanted - held
        if dropped:
            user.groups.remove(*dropped)
            CampusGroupGrant.objects.filter(user=user, group_id__in=dropped).delete()
        if added:
            user.groups.add(*added)
            # ignore_conflicts: two logins of one person at once both mark the same membership.
            CampusGroupGrant.objects.bulk_create(
                [CampusGroupGrant(user=user, group_id=gid) for gid in added - granted], ignore_conflicts=True
            )
    if dropped or added:
        logger.info("campus groups of user={} via {}: +{} -{}", user.pk, source, sorted(added), sorted(dropped))

import re

import pytest

from campus_agent.request_id import request_id_from_header, request_id_new

HEX16 = re.compile(r"^[0-9a-f]{16}$")
INVALID_IDS = ["not-an-id", "0123", "0123456789abcdef0", "0123456789abcdeg", "0123456789abcde\u00e9", "'; DROP--"]


def test_new_ids_are_16_hex_and_distinct():
    ids = {request_id_new() for _ in range(200)}
    assert len(ids) == 200
    assert all(HEX16.match(i) for i in ids)


def test_header_parsing():
    assert request_id_from_header("0123456789abcdef") == "0123456789abcdef"
    assert request_id_from_header(" 0123456789ABCDEF ") == "0123456789abcdef"
    for raw in [None, "", *INVALID_IDS]:
        replaced = request_id_from_header(raw)
        assert HEX16.match(replaced) and replaced != raw


@pytest.fixture(params=["wsgi", "asgi"])
def get(request, client, async_client):
    """GET through the sync (WSGI test client) and the async (ASGI) middleware paths."""
    if request.param == "wsgi":
        return lambda path, **headers: client.get(path, headers=headers)

    from asgiref.sync import async_to_sync

    return lambda path, **headers: async_to_sync(async_client.get)(path, headers=headers)


@pytest.mark.django_db
def test_valid_client_id_is_echoed(get):
    response = get("/healthz", **{"X-Request-Id": "0123456789abcdef"})
    assert response.status_code == 200
    assert response["X-Request-Id"] == "0123456789abcdef"


@pytest.mark.django_db
@pytest.mark.parametrize("sent", INVALID_IDS)
def test_invalid_client_id_is_replaced(get, sent):
    echoed = get("/healthz", **{"X-Request-Id": sent})["X-Request-Id"]
    assert HEX16.match(echoed) and echoed != sent


@pytest.mark.django_db
def test_id_is_generated_per_request_when_absent(get):
    first, second = get("/healthz")["X-Request-Id"], get("/healthz")["X-Request-Id"]
    assert HEX16.match(first) and HEX16.match(second) and first != second


@pytest.mark.django_db
def test_every_response_carries_the_id_even_a_404(get):
    response = get("/no-such-page-h0", **{"X-Request-Id": "fedcba9876543210"})
    assert response.status_code == 404
    assert response["X-Request-Id"] == "fedcba9876543210"

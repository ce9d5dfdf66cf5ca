import re

import pytest

from campus_agent.base.request_id import request_id_from_header, request_id_new

HEX16 = re.compile(r"^[0-9a-f]{16}$")
NGINX_ID = "6f1e5b3c9a0d4e7f8a2b1c0d9e8f7a6b"  # nginx's $request_id: 32 hex
UUID_ID = "3F2504E0-4F89-11D3-9A0C-0305E82C3301"  # kept as sent, upper case included
VALID_IDS = ["abcd1234", "0123456789abcdef", NGINX_ID, UUID_ID, "x" * 64, "not-an-id"]
INVALID_IDS = [
    "abc1234",  # 7 characters
    "x" * 65,
    "0123456789abcde\u00e9",
    "'; DROP--",
    "abcd_1234",
    "abcd.1234",
    "abcd 1234",
    "abcd1234\nX-Evil: 1",
]


def test_new_ids_are_16_hex_and_distinct():
    ids = {request_id_new() for _ in range(200)}
    assert len(ids) == 200
    assert all(HEX16.match(i) for i in ids)


def test_header_parsing():
    for sent in VALID_IDS:
        assert request_id_from_header(sent) == sent
    assert request_id_from_header(" 0123456789ABCDEF ") == "0123456789ABCDEF"
    # A full-width digit is a digit to `\d`, not to [0-9] (and no HTTP header carries it).
    for raw in [None, "", "0123456789abcde\uff10", *INVALID_IDS]:
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
@pytest.mark.parametrize("sent", ["0123456789abcdef", NGINX_ID, UUID_ID])
def test_valid_client_id_is_echoed(get, sent):
    response = get("/healthz", **{"X-Request-Id": sent})
    assert response.status_code == 200
    assert response["X-Request-Id"] == sent


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

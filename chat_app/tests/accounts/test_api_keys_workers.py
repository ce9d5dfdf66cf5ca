"""A personal API key on two worker processes (docs/design.md#other-clients): made through A, it works on B; revoked
through A, B refuses it at once (the key is checked on its row on every request: no cache to
wait out, with or without Redis). Fixtures: testkit/fixtures/workers.py."""
import httpx


def test_a_key_revoked_on_a_is_refused_at_once_on_b(workers, token):
    (a_url, _), (b_url, _) = workers
    made = httpx.post(f"{a_url}/api/v1/api-keys", json={"name": "两个进程"}, headers=token)
    assert made.status_code == 201, made.text
    key = {"Authorization": f"Bearer {made.json()['key']}"}
    assert httpx.get(f"{b_url}/api/v1/conversations", headers=key).status_code == 200
    assert httpx.delete(f"{a_url}/api/v1/api-keys/{made.json()['id']}", headers=token).status_code == 204
    refused = httpx.get(f"{b_url}/api/v1/conversations", headers=key)
    assert refused.status_code == 401 and refused.json()["code"] == 40101
    refused = httpx.post(f"{b_url}/api/v1/chat", json={"message": "还能用吗"}, headers=key)
    assert refused.status_code == 401

"""The WordLlama embeddings server (testkit/embeddings_server.py) itself: real vectors of the shape
an OpenAI-compatible server answers, a requested size honoured, a malformed request refused."""
import httpx
import numpy as np

from testkit.embeddings_server import MODEL_DIMENSIONS, embed


def test_it_answers_real_unit_vectors_in_openais_shape(embeddings_server):
    answer = httpx.post(f"{embeddings_server.url}/embeddings", json={"model": "m", "input": ["library hours", "major"]})
    assert answer.status_code == 200
    body = answer.json()
    assert body["object"] == "list" and body["model"] == "m"
    assert [item["index"] for item in body["data"]] == [0, 1]
    vectors = np.array([item["embedding"] for item in body["data"]])
    assert vectors.shape == (2, MODEL_DIMENSIONS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert np.allclose(vectors, embed(["library hours", "major"]), atol=1e-6)
    assert not np.allclose(vectors[0], vectors[1])


def test_a_requested_size_is_a_truncation(embeddings_server):
    answer = httpx.post(f"{embeddings_server.url}/embeddings", json={"model": "m", "input": "major", "dimensions": 64})
    vector = np.array(answer.json()["data"][0]["embedding"])
    assert vector.shape == (64,)
    full = embed(["major"])[0][:64]
    assert np.allclose(vector, full / np.linalg.norm(full), atol=1e-6)


def test_a_malformed_request_is_refused(embeddings_server):
    for body in ({"model": "m"}, {"model": "m", "input": [1]}, {"model": "m", "input": ["x"], "dimensions": 512}):
        assert httpx.post(f"{embeddings_server.url}/embeddings", json=body).status_code == 400
    assert len(embeddings_server.requests) == 3 and embeddings_server.asked.is_set()

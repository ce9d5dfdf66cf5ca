"""The embeddings client (knowledge_app/embeddings.py) against a real OpenAI-compatible server on
loopback that computes WordLlama vectors (testkit/embeddings_server.py), and its hostile answers."""

import json
import socket
import time

import numpy as np
import pytest
from loguru import logger

from knowledge_app.embeddings import (
    MSG_CONNECT,
    MSG_COUNT,
    MSG_DIMENSIONS,
    MSG_INDEX,
    MSG_ITEM,
    MSG_NO_DATA,
    MSG_NOT_JSON,
    MSG_NUMBER,
    MSG_STATUS,
    MSG_TEXT,
    MSG_TIMEOUT,
    MSG_TOO_LARGE,
    MSG_ZERO,
    EmbeddingsConfig,
    EmbeddingsError,
    aembeddings_create,
    embeddings_create,
)
from testkit.embeddings_server import MODEL_DIMENSIONS, embed

TEXTS = [
    "How do I change my major?",
    "When does the library open?",
    "转专业需要满足什么条件？",
    "Scholarships are awarded each autumn.",
    "Cooking appliances are not allowed in the dormitory.",
]
SECRET = "我的学号是 20260001，我想退学"


def config_for(server, **fields) -> EmbeddingsConfig:
    return EmbeddingsConfig(**{"base_url": server.url, "model": "wordllama", "dimensions": MODEL_DIMENSIONS,
                               "api_key": "sk-test", "timeout_sec": 1.0, "batch_size": 10, **fields})


def test_each_text_gets_its_real_vector_in_order(embeddings_server):
    vectors = embeddings_create(texts=TEXTS, config=config_for(embeddings_server))
    assert np.allclose(vectors, embed(TEXTS), atol=1e-6)
    request = embeddings_server.last_request
    assert request.body == {"model": "wordllama", "input": TEXTS, "encoding_format": "float"}
    assert request.headers["authorization"] == "Bearer sk-test"


def test_the_texts_are_sent_a_batch_at_a_time(embeddings_server):
    vectors = embeddings_create(texts=TEXTS, config=config_for(embeddings_server, batch_size=2))
    assert [r.body["input"] for r in embeddings_server.requests] == [TEXTS[0:2], TEXTS[2:4], TEXTS[4:]]
    assert np.allclose(vectors, embed(TEXTS), atol=1e-6)


def test_items_answered_out_of_order_are_put_back_by_their_index(embeddings_server):
    embeddings_server.reversed_()
    vectors = embeddings_create(texts=TEXTS, config=config_for(embeddings_server))
    assert np.allclose(vectors, embed(TEXTS), atol=1e-6)


def test_the_size_is_asked_for_only_when_configured(embeddings_server):
    vectors = embeddings_create(texts=TEXTS[:1], config=config_for(embeddings_server, dimensions=64,
                                                                    send_dimensions=True))
    assert embeddings_server.last_request.body["dimensions"] == 64
    assert np.allclose(vectors, embed(TEXTS[:1], 64), atol=1e-6)


def test_the_settings_name_the_provider(embeddings_settings, embeddings_server):
    assert np.allclose(embeddings_create(texts=TEXTS[:2]), embed(TEXTS[:2]), atol=1e-6)
    assert embeddings_server.last_request.body["model"] == "wordllama-l2-supercat"


def test_without_a_provider_nothing_is_asked(settings):
    settings.EMBEDDINGS_BASE_URL = ""
    with pytest.raises(ValueError, match="EMBEDDINGS_BASE_URL"):
        embeddings_create(texts=TEXTS)


async def test_the_async_twin_gives_the_same_vectors(embeddings_server):
    vectors = await aembeddings_create(texts=TEXTS, config=config_for(embeddings_server, batch_size=3))
    assert np.allclose(vectors, embed(TEXTS), atol=1e-6)
    assert len(embeddings_server.requests) == 2


def _answer(vectors, indexes=None) -> bytes:
    indexes = range(len(vectors)) if indexes is None else indexes
    items = [{"object": "embedding", "index": i, "embedding": v} for i, v in zip(indexes, vectors, strict=True)]
    return json.dumps({"object": "list", "data": items}).encode()


def _raw_json(text: str) -> bytes:
    return ('{"data": [{"index": 0, "embedding": [' + ", ".join([text] + ["0.5"] * (MODEL_DIMENSIONS - 1))
            + "]}]}").encode()


ONE = [0.5] * MODEL_DIMENSIONS
# Each answer to two texts (a secret first), or to one where the answer is a single raw item.
HOSTILE = {
    "500, quoting the input": (lambda s: s.fail(500), MSG_STATUS.format(status=500), 2),
    "401": (lambda s: s.fail(401), MSG_STATUS.format(status=401), 2),
    "an HTML page": (lambda s: s.garbage(), MSG_NOT_JSON, 2),
    "a vector too few": (lambda s: s.wrong_count(-1), MSG_COUNT.format(asked=2, answered=1), 2),
    "a vector too many": (lambda s: s.wrong_count(+1), MSG_COUNT.format(asked=2, answered=3), 2),
    "vectors of another size": (lambda s: s.wrong_dimensions(128), MSG_DIMENSIONS.format(got=128, expected=256), 2),
    "past the byte cap": (lambda s: s.huge(), MSG_TOO_LARGE.format(size=(64 * 1024 + 2 * 256 * 32) // 1024), 2),
    "no data": (lambda s: s.raw({"object": "list"}), MSG_NO_DATA, 2),
    "a list for an answer": (lambda s: s.raw([ONE, ONE]), MSG_NO_DATA, 2),
    "an item without embedding": (lambda s: s.raw({"data": [{"index": 0}, {"index": 1}]}), MSG_ITEM.format(n=1), 2),
    "an index twice": (lambda s: s.garbage(_answer([ONE, ONE], [0, 0]), "application/json"), MSG_INDEX.format(last=1), 2),
    "an index on one item only": (
        lambda s: s.raw({"data": [{"index": 0, "embedding": ONE}, {"embedding": ONE}]}), MSG_INDEX.format(last=1), 2
    ),
    "zeros": (lambda s: s.raw({"data": [{"index": 0, "embedding": [0] * 256}, {"index": 1, "embedding": ONE}]}),
              MSG_ZERO.format(n=1), 2),
    "NaN": (lambda s: s.garbage(_raw_json("NaN"), "application/json"), MSG_NOT_JSON, 1),
    "a number past float": (lambda s: s.garbage(_raw_json("1e999"), "application/json"), MSG_NUMBER.format(n=1), 1),
    "an integer past float": (lambda s: s.garbage(_raw_json("1" + "0" * 400), "application/json"),
                              MSG_NUMBER.format(n=1), 1),
    "a string": (lambda s: s.garbage(_raw_json('"0.1"'), "application/json"), MSG_NUMBER.format(n=1), 1),
    "true": (lambda s: s.garbage(_raw_json("true"), "application/json"), MSG_NUMBER.format(n=1), 1),
}


@pytest.mark.parametrize("script, message, count", list(HOSTILE.values()), ids=list(HOSTILE))
def test_an_unusable_answer_is_a_clear_error(embeddings_server, script, message, count):
    script(embeddings_server)
    with pytest.raises(EmbeddingsError) as failure:
        embeddings_create(texts=[SECRET, TEXTS[0]][:count], config=config_for(embeddings_server))
    assert str(failure.value) == message


def test_a_server_that_never_answers_fails_within_the_timeout(embeddings_server):
    embeddings_server.hang()
    started = time.monotonic()
    with pytest.raises(EmbeddingsError) as failure:
        embeddings_create(texts=TEXTS, config=config_for(embeddings_server, timeout_sec=0.3))
    assert str(failure.value) == MSG_TIMEOUT.format(seconds=0.3)
    assert time.monotonic() - started < 2


def test_a_server_that_is_not_there_is_said_so():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    config = EmbeddingsConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", dimensions=4)
    with pytest.raises(EmbeddingsError, match=MSG_CONNECT):
        embeddings_create(texts=TEXTS, config=config)


@pytest.mark.parametrize("text", ["", "   ", None])
def test_an_empty_text_is_refused_before_any_request(embeddings_server, text):
    with pytest.raises(EmbeddingsError, match=MSG_TEXT.format(n=2)):
        embeddings_create(texts=[TEXTS[0], text], config=config_for(embeddings_server))
    assert embeddings_server.requests == []


def test_no_text_reaches_the_log_or_the_error(embeddings_server):
    """The server's error quotes the input, as some do: neither the error nor the log repeats it."""
    logged: list[str] = []
    sink = logger.add(lambda message: logged.append(str(message)), level="DEBUG")
    try:
        embeddings_create(texts=[TEXTS[0]], config=config_for(embeddings_server))
        embeddings_server.fail(400)
        with pytest.raises(EmbeddingsError) as failure:
            embeddings_create(texts=[SECRET], config=config_for(embeddings_server))
    finally:
        logger.remove(sink)
    assert SECRET in embeddings_server.last_request.body["input"]
    assert "20260001" not in str(failure.value)
    assert any("failed on 1 text(s)" in line for line in logged)
    assert not any("20260001" in line or TEXTS[0] in line for line in logged)

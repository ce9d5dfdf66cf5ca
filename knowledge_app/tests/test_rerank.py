"""The reranker client (knowledge_app/rerank.py) against a real Jina/Cohere-shaped rerank server on
loopback that scores by shared character bigrams (testkit/rerank_server.py), and its hostile
answers."""

import json
import socket
import time

import pytest
from loguru import logger

from knowledge_app.rerank import (
    MSG_CONNECT,
    MSG_COUNT,
    MSG_INDEX,
    MSG_ITEM,
    MSG_NO_RESULTS,
    MSG_NOT_JSON,
    MSG_NUMBER,
    MSG_STATUS,
    MSG_TEXT,
    MSG_TIMEOUT,
    MSG_TOO_LARGE,
    Ranked,
    RerankConfig,
    RerankError,
    answer_max_bytes,
    arerank_create,
    rerank_create,
)
from testkit.rerank_server import relevance

QUERY = "宿舍几点关门"
DOCUMENTS = [
    "图书馆每天早上八点开放。",
    "宿舍楼每晚 23:00 关门，晚归需登记。",
    "宿舍内禁止使用电磁炉。",
    "几点关门？宿舍几点关门由学校规定。",
]
SECRET = "我的学号是 20260001，宿舍几点关门"


def config_for(server, **fields) -> RerankConfig:
    return RerankConfig(**{"base_url": server.url, "model": "bigram", "api_key": "sk-test", "timeout_sec": 1.0,
                           **fields})


def test_the_documents_come_back_best_first_with_their_real_scores(rerank_server):
    ranked = rerank_create(query=QUERY, documents=DOCUMENTS, top_n=3, config=config_for(rerank_server))
    assert [r.index for r in ranked] == [3, 1, 2]
    assert [r.score for r in ranked] == [relevance(QUERY, DOCUMENTS[i]) for i in (3, 1, 2)]
    request = rerank_server.last_request
    assert request.path == "/v1/rerank"
    assert request.body == {"model": "bigram", "query": QUERY, "documents": DOCUMENTS, "top_n": 3}
    assert request.headers["authorization"] == "Bearer sk-test"


def test_an_endpoint_named_in_full_is_asked_as_it_is(rerank_server):
    """DashScope's compatible mode calls it …/reranks: the setting names the endpoint itself."""
    config = config_for(rerank_server, base_url=f"{rerank_server.url}/reranks")
    assert [r.index for r in rerank_create(query=QUERY, documents=DOCUMENTS, top_n=1, config=config)] == [3]
    assert rerank_server.last_request.path == "/v1/reranks"
    assert RerankConfig(base_url="http://h/v1/rerank/", model="m").url == "http://h/v1/rerank"


def test_a_server_that_answers_every_document_is_cut_to_top_n_and_sorted(rerank_server):
    every = [{"index": i, "relevance_score": s} for i, s in enumerate([0.1, 0.9, 0.5, 0.9])]
    rerank_server.raw({"results": every})
    ranked = rerank_create(query=QUERY, documents=DOCUMENTS, top_n=2, config=config_for(rerank_server))
    assert ranked == [Ranked(index=1, score=0.9), Ranked(index=3, score=0.9)]  # equal scores: the server's order


def test_the_settings_name_the_reranker(rerank_settings, rerank_server):
    assert [r.index for r in rerank_create(query=QUERY, documents=DOCUMENTS, top_n=1)] == [3]
    assert rerank_server.last_request.body["model"] == "bigram-reranker"
    assert rerank_server.last_request.headers["authorization"] == "Bearer sk-rerank-test"


def test_without_a_reranker_nothing_is_asked(settings):
    settings.RERANK_BASE_URL = ""
    with pytest.raises(ValueError, match="RERANK_BASE_URL"):
        rerank_create(query=QUERY, documents=DOCUMENTS, top_n=1)


async def test_the_async_twin_gives_the_same_order(rerank_server):
    ranked = await arerank_create(query=QUERY, documents=DOCUMENTS, top_n=4, config=config_for(rerank_server))
    assert ranked == sorted((Ranked(index=i, score=relevance(QUERY, d)) for i, d in enumerate(DOCUMENTS)),
                            key=lambda r: -r.score)


def _raw_score(text: str) -> bytes:
    return ('{"results": [{"index": 0, "relevance_score": ' + text + '}, {"index": 1, "relevance_score": 0.5}]}'
            ).encode()


CAP = answer_max_bytes([SECRET, DOCUMENTS[1]])
# Each an answer to two documents, asked for the best two.
HOSTILE = {
    "500, quoting the query": (lambda s: s.fail(500), MSG_STATUS.format(status=500)),
    "401": (lambda s: s.fail(401), MSG_STATUS.format(status=401)),
    "an HTML page": (lambda s: s.garbage(), MSG_NOT_JSON),
    "past the byte cap": (lambda s: s.huge(), MSG_TOO_LARGE.format(size=CAP // 1024)),
    "no results": (lambda s: s.raw({"data": []}), MSG_NO_RESULTS),
    "a list for an answer": (lambda s: s.raw([{"index": 0, "relevance_score": 1}]), MSG_NO_RESULTS),
    "a result too few": (lambda s: s.too_few(1), MSG_COUNT.format(asked=2, answered=1, least=2)),
    "a result too many": (lambda s: s.raw({"results": [{"index": i, "relevance_score": 0.5} for i in range(3)]}),
                          MSG_COUNT.format(asked=2, answered=3, least=2)),
    "an index out of range": (lambda s: s.index_out_of_range(), None),
    "an index twice": (lambda s: s.index_twice(), MSG_INDEX.format(n=2, index=1, last=1)),
    "a negative index": (lambda s: s.raw({"results": [{"index": -1, "relevance_score": 1}, {"index": 1,
                                                                                          "relevance_score": 0}]}),
                         MSG_INDEX.format(n=1, index=-1, last=1)),
    "an index as text": (lambda s: s.raw({"results": [{"index": "0", "relevance_score": 1}, {"index": 1,
                                                                                           "relevance_score": 0}]}),
                         MSG_ITEM.format(n=1)),
    "no score": (lambda s: s.raw({"results": [{"index": 0}, {"index": 1}]}), MSG_ITEM.format(n=1)),
    "TEI's native answer": (lambda s: s.raw([{"index": 0, "score": 0.9}, {"index": 1, "score": 0.1}]),
                            MSG_NO_RESULTS),
    "NaN": (lambda s: s.garbage(_raw_score("NaN"), "application/json"), MSG_NOT_JSON),
    "a number past float": (lambda s: s.garbage(_raw_score("1e999"), "application/json"), MSG_NUMBER.format(n=1)),
    "a string": (lambda s: s.garbage(_raw_score('"0.9"'), "application/json"), MSG_NUMBER.format(n=1)),
    "true": (lambda s: s.garbage(_raw_score("true"), "application/json"), MSG_NUMBER.format(n=1)),
}


@pytest.mark.parametrize("script, message", list(HOSTILE.values()), ids=list(HOSTILE))
def test_an_unusable_answer_is_a_clear_error(rerank_server, script, message):
    script(rerank_server)
    with pytest.raises(RerankError) as failure:
        rerank_create(query=SECRET, documents=[SECRET, DOCUMENTS[1]], top_n=2, config=config_for(rerank_server))
    if message is None:  # the index the server gave: the first result's, moved out of range
        assert str(failure.value).startswith("重排模型回答的第 1 项的 index 10") and "不在 0 到 1 之间" in str(failure.value)
    else:
        assert str(failure.value) == message
    assert "20260001" not in str(failure.value)


def test_the_byte_cap_counts_the_documents_echoed_back_escaped():
    documents = ["宿" * 600] * 20
    echoed = json.dumps({"results": [{"index": i, "relevance_score": 0.123456789, "document": {"text": d}}
                                     for i, d in enumerate(documents)]}).encode()  # ASCII-escaped, as json.dumps does
    assert len(echoed) < answer_max_bytes(documents) < len(echoed) + 128 * 1024


def test_a_server_that_never_answers_fails_within_the_timeout(rerank_server):
    rerank_server.hang()
    started = time.monotonic()
    with pytest.raises(RerankError) as failure:
        rerank_create(query=QUERY, documents=DOCUMENTS, top_n=2, config=config_for(rerank_server, timeout_sec=0.3))
    assert str(failure.value) == MSG_TIMEOUT.format(seconds=0.3)
    assert time.monotonic() - started < 2


def test_a_server_that_is_not_there_is_said_so():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    config = RerankConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m")
    with pytest.raises(RerankError, match=MSG_CONNECT):
        rerank_create(query=QUERY, documents=DOCUMENTS, top_n=1, config=config)


@pytest.mark.parametrize("text", ["", "   ", None])
def test_an_empty_document_is_refused_before_any_request(rerank_server, text):
    with pytest.raises(RerankError, match=MSG_TEXT.format(n=2)):
        rerank_create(query=QUERY, documents=[DOCUMENTS[0], text], top_n=1, config=config_for(rerank_server))
    assert rerank_server.requests == []


def test_no_text_reaches_the_log_or_the_error(rerank_server):
    """The server's error quotes the query, as some do: neither the error nor the log repeats it."""
    logged: list[str] = []
    sink = logger.add(lambda message: logged.append(str(message)), level="DEBUG")
    try:
        rerank_create(query=QUERY, documents=DOCUMENTS, top_n=1, config=config_for(rerank_server))
        rerank_server.fail(400)
        with pytest.raises(RerankError) as failure:
            rerank_create(query=SECRET, documents=DOCUMENTS, top_n=1, config=config_for(rerank_server))
    finally:
        logger.remove(sink)
    assert rerank_server.last_request.body["query"] == SECRET
    assert "20260001" not in str(failure.value)
    assert any("failed on 4 document(s)" in line for line in logged)
    assert not any("20260001" in line or QUERY in line or DOCUMENTS[1] in line for line in logged)

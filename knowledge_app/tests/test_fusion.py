"""Reciprocal rank fusion (knowledge_app.fusion), which the vector side will use beside the keyword
index."""

import pytest

from knowledge_app.fusion import RRF_K, rrf_fuse


def test_an_item_scores_the_sum_of_one_over_k_plus_its_rank_in_each_ranking():
    fused = dict(rrf_fuse([["a", "b", "c"], ["c", "a"]]))
    assert fused["a"] == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))
    assert fused["c"] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))
    assert fused["b"] == pytest.approx(1 / (RRF_K + 2))


def test_items_both_rankings_agree_on_come_first():
    assert [item for item, _ in rrf_fuse([[1, 2, 3, 4], [4, 2, 1, 5]])] == [1, 2, 4, 3, 5]


def test_ties_keep_the_order_first_seen_and_k_changes_the_weights():
    assert [item for item, _ in rrf_fuse([["x", "y"], ["y", "x"]])] == ["x", "y"]
    # k = 0: a first place (1/1) weighs as much as two second places (1/2 + 1/2).
    fused = dict(rrf_fuse([["a", "b"], ["c", "b"]], k=0))
    assert fused == {"a": 1.0, "b": 1.0, "c": 1.0}


def test_an_item_listed_twice_in_a_ranking_counts_once_at_its_best_rank():
    assert rrf_fuse([["a", "a", "b"]]) == [("a", 1 / (RRF_K + 1)), ("b", 1 / (RRF_K + 3))]


def test_no_rankings_or_empty_ones_fuse_to_nothing_and_a_negative_k_is_refused():
    assert rrf_fuse([]) == [] and rrf_fuse([[], []]) == []
    with pytest.raises(ValueError):
        rrf_fuse([["a"]], k=-1)

"""HCB16 votes, counts and labels (Alg. 1 and 2, multiclass ours; votes and α)."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.hamm2016.labels import majority_labels, one_hot, party_votes, soft_labels, vote_counts


def test_party_votes_layout_binary_and_multiclass():
    assert party_votes(np.array([0, 1, 1, 0]), 2).tolist() == [0.0, 1.0, 1.0, 0.0]
    v = party_votes(np.array([2, 0, 1]), 3)
    assert v.shape == (9,)
    assert v.reshape(3, 3).tolist() == [[0, 0, 1], [1, 0, 0], [0, 1, 0]]  # point j, class k at j·C + k
    assert v.dtype == np.float64
    with pytest.raises(ValueError, match="0..2"):
        party_votes(np.array([0, 3]), 3)
    with pytest.raises(ValueError, match="integer"):
        party_votes(np.array([0.5, 1.0]), 2)
    with pytest.raises(ValueError, match="classes"):
        party_votes(np.array([0, 1]), 1)


@pytest.mark.parametrize("classes", [2, 4])
def test_vote_counts_from_summed_vectors_match_direct_counts(classes):
    rng = np.random.default_rng(0)  # public simulation data
    M, N = 7, 30
    preds = rng.integers(0, classes, size=(M, N))  # public simulation data
    total = sum(party_votes(p, classes) for p in preds)
    counts = vote_counts(total + 1e-8, N, classes, M)  # a DCA sum is integral up to fixed-point rounding
    direct = np.stack([(preds == k).sum(axis=0) for k in range(classes)], axis=1)
    assert counts.dtype == np.int64 and counts.shape == (N, classes)
    assert np.array_equal(counts, direct)
    assert np.all(counts.sum(axis=1) == M)


def test_vote_counts_refuses_malformed_sums():
    with pytest.raises(ValueError, match="length 3"):
        vote_counts(np.array([1.0, 2.0]), 3, 2, 5)
    with pytest.raises(ValueError, match="not an integer"):
        vote_counts(np.array([1.0, 2.5, 0.0]), 3, 2, 5)
    with pytest.raises(ValueError, match="outside"):
        vote_counts(np.array([1.0, 6.0, 0.0]), 3, 2, 5)
    with pytest.raises(ValueError, match="outside"):
        vote_counts(np.array([-1.0, 2.0, 0.0]), 3, 2, 5)
    with pytest.raises(ValueError, match="point 1 add up to 4"):
        vote_counts(np.array([2.0, 3.0, 0.0, 1.0, 1.0, 2.0]), 2, 3, 5)
    with pytest.raises(ValueError, match="non-finite"):
        vote_counts(np.array([np.nan, 1.0]), 2, 2, 5)


def test_majority_tie_rule_even_and_odd_M():
    # even M = 4: a 2–2 tie goes to class 1 (the paper's +1, Alg. 1 with even M)
    c1 = np.array([0, 1, 2, 3, 4])
    counts = np.stack([4 - c1, c1], axis=1)
    assert majority_labels(counts, 4).tolist() == [0, 0, 1, 1, 1]
    # odd M = 5: no ties; class 1 iff at least 3 votes
    c1 = np.arange(6)
    assert majority_labels(np.stack([5 - c1, c1], axis=1), 5).tolist() == [0, 0, 0, 1, 1, 1]
    # multiclass: argmax, ties to the lowest class index
    counts = np.array([[2, 2, 0], [0, 2, 2], [1, 1, 2], [4, 0, 0]])
    assert majority_labels(counts, 4).tolist() == [0, 1, 2, 0]


def test_soft_labels_are_vote_fractions_in_unit_interval():
    rng = np.random.default_rng(1)  # public simulation data
    for classes, M in [(2, 1), (2, 8), (2, 9), (5, 13)]:
        preds = rng.integers(0, classes, size=(M, 50))  # public simulation data
        counts = vote_counts(sum(party_votes(p, classes) for p in preds), 50, classes, M)
        alpha = soft_labels(counts, M)
        assert alpha.shape == (50, classes)
        assert np.all((alpha >= 0) & (alpha <= 1))
        assert np.allclose(alpha.sum(axis=1), 1.0)
        if classes == 2:
            assert np.allclose(alpha[:, 1], (preds == 1).mean(axis=0))  # α(x_j) = (1/M)#{h_i(x_j) = +1}
    assert soft_labels(np.array([[0, 3], [3, 0]]), 3).tolist() == [[0.0, 1.0], [1.0, 0.0]]


def test_label_functions_check_counts_against_M():
    with pytest.raises(ValueError, match="expected M = 5"):
        soft_labels(np.array([[1, 3]]), 5)
    with pytest.raises(ValueError, match="expected M = 5"):
        majority_labels(np.array([[1, 3]]), 5)
    with pytest.raises(ValueError, match="non-negative"):
        soft_labels(np.array([[-1, 6]]), 5)
    with pytest.raises(ValueError, match="parties"):
        soft_labels(np.array([[1, 3]]), 0)


def test_one_hot():
    assert one_hot(np.array([1, 0, 2]), 3).tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]
    with pytest.raises(ValueError):
        one_hot(np.array([3]), 3)

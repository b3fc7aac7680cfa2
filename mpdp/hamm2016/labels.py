"""Votes, vote counts and labels of the auxiliary points (paper Alg. 1 and 2; multiclass ours).

Class labels are indices 0..C−1; with C = 2, class 1 is the paper's +1 and class 0 its −1.

A party turns its classifier's predictions on the N public auxiliary points into a vector
(:func:`party_votes`) whose sum over all parties is everything the curator needs: in the federation that sum is
computed by a secure-sum DCA job, so the curator never sees one party's votes (ours). From the summed
vector, :func:`vote_counts` recovers the (N, C) count matrix n_jk = #{i : h_i(x_j) = k}, and
:func:`majority_labels` (Alg. 1 step 1) or :func:`soft_labels` (Alg. 2 step 1, eq. (12) weights) turn it into
labels.
"""

from __future__ import annotations

import numpy as np

COUNT_TOL = 1e-6  # a summed vote entry must be this close to an integer


def _check_classes(classes: int) -> int:
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got {classes!r}")
    return int(classes)


def _check_parties(parties: int) -> int:
    if isinstance(parties, bool) or not isinstance(parties, (int, np.integer)) or parties < 1:
        raise ValueError(f"parties must be an integer >= 1, got {parties!r}")
    return int(parties)


def party_votes(pred: np.ndarray, classes: int) -> np.ndarray:
    """One party's DCA vector from its predictions h_i(x_1..x_N) ∈ {0..C−1}.

    C = 2: shape (N,), entry j = I[h_i(x_j) = 1] (the paper's I[h_i(x_j) = +1]).
    C > 2: shape (N·C,), one-hot, row-major: entry j·C + k = I[h_i(x_j) = k].
    Every entry is 0 or 1, so the ℓ∞ clip bound of the secure sum is 1.
    """
    C = _check_classes(classes)
    p = np.asarray(pred)
    if p.dtype == bool:
        p = p.astype(np.int64)
    if p.ndim != 1:
        raise ValueError(f"predictions must be a 1-d array of class indices, got shape {p.shape}")
    if p.size and not np.issubdtype(p.dtype, np.integer):
        if not np.all(np.isfinite(p)) or np.any(p != np.round(p)):
            raise ValueError("predictions must be integer class indices")
    p = p.astype(np.int64)
    if p.size and (p.min() < 0 or p.max() >= C):
        raise ValueError(f"predictions must lie in 0..{C - 1}, got range [{p.min()}, {p.max()}]")
    if C == 2:
        return (p == 1).astype(np.float64)
    out = np.zeros((p.size, C), dtype=np.float64)
    out[np.arange(p.size), p] = 1.0
    return out.ravel()


def vote_counts(vector_sum: np.ndarray, n_aux: int, classes: int, parties: int) -> np.ndarray:
    """(N, C) int64 counts n_jk = #{i : h_i(x_j) = k} from the sum over parties of :func:`party_votes` vectors.

    Binary: the sum holds n_j1 only and n_j0 = M − n_j1. Multiclass: the sum is the row-major (N, C) count matrix.
    Validates length, near-integrality (|v − round(v)| ≤ 1e−6), the range [0, M] and (multiclass) that each
    row sums to M; raises ValueError naming the first offending entry otherwise.
    """
    C = _check_classes(classes)
    M = _check_parties(parties)
    if isinstance(n_aux, bool) or not isinstance(n_aux, (int, np.integer)) or n_aux < 1:
        raise ValueError(f"n_aux must be an integer >= 1, got {n_aux!r}")
    v = np.asarray(vector_sum, dtype=np.float64)
    expected = n_aux if C == 2 else n_aux * C
    if v.ndim != 1 or v.size != expected:
        raise ValueError(f"vote sum must be a vector of length {expected} (N = {n_aux}, C = {C}), got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"vote sum holds non-finite values at {np.flatnonzero(~np.isfinite(v))[:5].tolist()}")
    r = np.round(v)
    off = np.abs(v - r) > COUNT_TOL
    if np.any(off):
        i = int(np.flatnonzero(off)[0])
        raise ValueError(f"vote sum entry {i} = {v[i]!r} is not an integer count (tolerance {COUNT_TOL})")
    bad = (r < 0) | (r > M)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"vote sum entry {i} = {r[i]:g} lies outside [0, M = {M}]")
    r = r.astype(np.int64)
    if C == 2:
        return np.stack([M - r, r], axis=1)
    counts = r.reshape(n_aux, C)
    sums = counts.sum(axis=1)
    if np.any(sums != M):
        j = int(np.flatnonzero(sums != M)[0])
        raise ValueError(f"votes on auxiliary point {j} add up to {sums[j]}, expected one vote per party (M = {M})")
    return counts


def _check_counts(counts: np.ndarray, parties: int) -> np.ndarray:
    M = _check_parties(parties)
    c = np.asarray(counts)
    if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] < 2:
        raise ValueError(f"counts must be an (N, C) matrix with C >= 2, got shape {c.shape}")
    if not np.issubdtype(c.dtype, np.integer):
        if not np.all(np.isfinite(c)) or np.any(c != np.round(c)):
            raise ValueError("counts must be integers")
    c = c.astype(np.int64)
    if np.any(c < 0):
        raise ValueError("counts must be non-negative")
    sums = c.sum(axis=1)
    if np.any(sums != M):
        j = int(np.flatnonzero(sums != M)[0])
        raise ValueError(f"counts of auxiliary point {j} add up to {sums[j]}, expected M = {M}")
    return c


def majority_labels(counts: np.ndarray, parties: int) -> np.ndarray:
    """Alg. 1 step 1: v(x_j) as a class index (N,) int64.

    Binary: class 1 iff n_j1 ≥ M/2, so an even-M tie goes to class 1 (the paper's +1).
    Multiclass: argmax_k n_jk, ties to the lowest class index.
    """
    c = _check_counts(counts, parties)
    if c.shape[1] == 2:
        return (2 * c[:, 1] >= int(parties)).astype(np.int64)  # integer form of n_j1 ≥ M/2
    return np.argmax(c, axis=1).astype(np.int64)  # argmax returns the first maximum


def soft_labels(counts: np.ndarray, parties: int) -> np.ndarray:
    """Alg. 2 step 1: α_jk = n_jk / M, an (N, C) float array in [0, 1] whose rows sum to 1.

    For C = 2, α_j1 = α(x_j) of the paper (the fraction of +1 votes).
    """
    c = _check_counts(counts, parties)
    return c.astype(np.float64) / float(parties)


def one_hot(labels: np.ndarray, classes: int) -> np.ndarray:
    """(N, C) indicator matrix of class indices; majority vote = :func:`~mpdp.hamm2016.erm.fit_soft` on this."""
    C = _check_classes(classes)
    y = np.asarray(labels).astype(np.int64)
    if y.ndim != 1 or (y.size and (y.min() < 0 or y.max() >= C)):
        raise ValueError(f"labels must be a 1-d array of indices in 0..{C - 1}")
    out = np.zeros((y.size, C), dtype=np.float64)
    out[np.arange(y.size), y] = 1.0
    return out

"""Fully linear proofs (mpdp.math.flp): completeness and soundness, statistically.

Every predicate at small d: valid inputs are accepted in every trial; every invalid class — out of range, over the
norm, two-hot (and zero-hot), non-bit entries, a proof computed for another vector, a proof share altered at one
node, a forged proof that zeroes the circuit's output, a wrong length — is rejected in every one of TRIALS random
trials. Trials run as one batch (the circuit takes leading batch axes), with M = 3 verifiers, fresh joint and query
randomness per trial.
"""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.math import field as F
from mpdp.math import flp

TRIALS = 1000
M = 3
rng = np.random.default_rng(20251126)  # public test data only; every share, seed and query point is from F.rand


def _rand(*shape: int) -> np.ndarray:
    return F.rand(int(np.prod(shape))).reshape(shape)


def _share(x: np.ndarray) -> list[np.ndarray]:
    helpers = [_rand(*x.shape) for _ in range(M - 1)]
    lead = x.copy()
    for h in helpers:
        lead = F.sub(lead, h)
    return [lead] + helpers


def _verify(c: flp.Circuit, meas: np.ndarray, proof: np.ndarray, jr: np.ndarray, alter=None) -> np.ndarray:
    ms, ps = _share(meas), _share(proof)
    if alter is not None:
        alter(ms, ps)
    qr = _rand(meas.shape[0], c.proofs)
    while bool((F.pow_vec(qr, c.n) == 1).any()):  # never in practice (probability n/p)
        qr = _rand(meas.shape[0], c.proofs)
    ver = F.sum(np.stack([c.query(ms[k], ps[k], qr, jr, M) for k in range(M)]), axis=0)
    return c.decide(ver)


def _prove(c: flp.Circuit, meas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = meas.shape[0]
    jr = _rand(n, c.proofs, c.jr_len)
    return c.prove(meas, jr, _rand(n, c.proofs, c.arity)), jr


def _accepts(c: flp.Circuit, meas: np.ndarray, alter=None) -> np.ndarray:
    proof, jr = _prove(c, meas)
    return _verify(c, meas, proof, jr, alter)


def _encode(c: flp.Circuit, rows: list[list[np.ndarray]]) -> np.ndarray:
    return np.stack([c.encode(r) for r in rows]).astype(np.uint64)


# -- circuits at small d ---------------------------------------------------------------------------------------
D = 4
RANGE = flp.Circuit([flp.RangeVec(D, 10, 5)])  # every y_j ∈ [−5, 5]
L2 = flp.Circuit([flp.L2Ball(D, 5, 100)])  # ‖y‖² ≤ 100, |y_j| ≤ 16
ONE_HOT = flp.Circuit([flp.OneHot(D, 1)])
Q, C = 3, 4  # vote blocks: Q query points of C classes
VOTES = flp.Circuit([flp.VoteBlocks(Q, C)])  # per point one vote: C bits summing to 1
VOTES2 = flp.Circuit([flp.VoteBlocks(Q, C, count=2)])  # per point two votes (two teachers), each class at most once
BINARY = flp.Circuit([flp.VoteBlocks(D, 2)])  # binary votes: v_j = I[class 1], a bit


def _valid_range(n: int) -> list[list[np.ndarray]]:
    return [[rng.integers(-5, 6, D)] for _ in range(n)]


def _valid_l2(n: int) -> list[list[np.ndarray]]:
    out = []
    while len(out) < n:
        y = rng.integers(-10, 11, D)
        if int((y * y).sum()) <= 100:
            out.append([y])
    return out


def _valid_hot(n: int) -> list[list[np.ndarray]]:
    return [[np.eye(D, dtype=np.int64)[rng.integers(D)]] for _ in range(n)]


def _valid_votes(n: int, count: int = 1) -> list[list[np.ndarray]]:
    out = []
    for _ in range(n):
        x = np.zeros((Q, C), dtype=np.int64)
        for j in range(Q):
            x[j, rng.choice(C, size=count, replace=False)] = 1
        out.append([x.reshape(-1)])
    return out


def _valid_binary(n: int) -> list[list[np.ndarray]]:
    return [[rng.integers(0, 2, D)] for _ in range(n)]


def _bits(values: np.ndarray, width: int) -> np.ndarray:
    return ((values[:, None] >> np.arange(width)) & 1).reshape(-1)


def test_soundness_bound_and_repetitions():
    for c in (RANGE, L2, ONE_HOT, VOTES, BINARY, flp.Circuit([flp.RangeVec(1000, 2**18 - 3, 2**17), flp.L2Ball(1000, 20, 2**40)])):
        assert c.soundness_log2 <= -flp.SOUNDNESS_BITS
        assert c.soundness_log2 + 40 <= -flp.TARGET_BITS  # ≤ 2^-60 with 2^40 XOF evaluations
        assert c.proofs >= flp.MIN_PROOFS == 3  # Prio3: Field64 with joint randomness runs at least 3 proofs


@pytest.mark.parametrize(
    "circuit,valid",
    [(RANGE, _valid_range), (L2, _valid_l2), (ONE_HOT, _valid_hot), (VOTES, _valid_votes), (VOTES2, lambda n: _valid_votes(n, 2)), (BINARY, _valid_binary)],
    ids=["range", "l2", "one-hot", "votes", "votes-count-2", "votes-binary"],
)
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_valid_inputs_are_always_accepted_and_truncate_to_the_input(circuit, valid):
    rows = valid(TRIALS)
    meas = _encode(circuit, rows)
    assert bool(_accepts(circuit, meas).all())
    out = F.sum(np.stack([circuit.truncate(s, M) for s in _share(meas)]), axis=0)
    assert np.array_equal(F.to_signed(out), np.stack([r[0] for r in rows]))


def _out_of_range(n: int) -> np.ndarray:
    """y_j ∉ [−5, 5] for one coordinate: its first decomposition is honest (x = y + 5 < 16), the second wraps mod 16."""
    c = RANGE.predicates[0]
    out = []
    for _ in range(n):
        y = rng.integers(-5, 6, D)
        y[rng.integers(D)] = rng.choice([6, 7, 8, 10])
        x = y + 5
        out.append(np.concatenate([_bits(x, c.bits), _bits((x + c.gap) % (1 << c.bits), c.bits)]))
    return np.stack(out).astype(np.uint64)


def _non_bits(c: flp.Circuit, rows: np.ndarray, big: bool) -> np.ndarray:
    """One measurement element per trial replaced by a non-bit: 2, −1, 10^9 or a uniform field element."""
    rows = rows.copy()
    pos = rng.integers(rows.shape[1], size=rows.shape[0])
    vals = F.rand(rows.shape[0]) if big else F.from_ints(rng.choice([2, -1, 10**9], size=rows.shape[0]).tolist())
    vals = np.where(vals <= 1, np.uint64(2), vals)
    rows[np.arange(rows.shape[0]), pos] = vals
    return rows


def _over_norm(n: int) -> np.ndarray:
    """‖y‖² ∈ (100, 4·256]: entries in range, the slack bits those of (bound − ‖y‖²) mod 2^7 or random."""
    c = L2.predicates[0]
    out = []
    while len(out) < n:
        y = rng.integers(-16, 16, D)
        norm2 = int((y * y).sum())
        if norm2 <= 100:
            continue
        slack = (100 - norm2) % (1 << c.slack_bits) if rng.random() < 0.5 else int(rng.integers(1 << c.slack_bits))
        out.append(np.concatenate([_bits(y + 16, c.entry_bits), _bits(np.array([slack]), c.slack_bits)]))
    return np.stack(out).astype(np.uint64)


def _multi_hot(n: int) -> np.ndarray:
    out = []
    for _ in range(n):
        k = int(rng.choice([0, 2, 3, 4]))  # zero-hot, two-hot, …
        x = np.zeros(D, dtype=np.int64)
        x[rng.choice(D, size=k, replace=False)] = 1
        out.append(x)
    return np.stack(out).astype(np.uint64)


def _bad_votes(n: int, count: int = 1) -> np.ndarray:
    """Per trial one point's block (at least one, sometimes all) holds a wrong number of votes: 0, count + 1 … C."""
    out = []
    wrong = [k for k in range(C + 1) if k != count]
    for row in _valid_votes(n, count):
        x = row[0].reshape(Q, C)
        for j in rng.choice(Q, size=int(rng.integers(1, Q + 1)), replace=False):
            x[j] = 0
            x[j, rng.choice(C, size=int(rng.choice(wrong)), replace=False)] = 1
        out.append(x.reshape(-1))
    return np.stack(out).astype(np.uint64)


@pytest.mark.parametrize(
    "circuit,invalid",
    [
        (RANGE, _out_of_range),
        (L2, _over_norm),
        (ONE_HOT, _multi_hot),
        (RANGE, lambda n: _non_bits(RANGE, _encode(RANGE, _valid_range(n)), False)),
        (L2, lambda n: _non_bits(L2, _encode(L2, _valid_l2(n)), True)),
        (ONE_HOT, lambda n: _non_bits(ONE_HOT, _encode(ONE_HOT, _valid_hot(n)), False)),
        (VOTES, _bad_votes),
        (VOTES2, lambda n: _bad_votes(n, 2)),
        (VOTES, lambda n: _non_bits(VOTES, _encode(VOTES, _valid_votes(n)), False)),
        (BINARY, lambda n: _non_bits(BINARY, _encode(BINARY, _valid_binary(n)), False)),
    ],
    ids=["range-out-of-range", "l2-over-norm", "one-hot-two-hot", "range-non-bit", "l2-non-bit", "one-hot-non-bit",
         "votes-two-hot-or-empty", "votes-count-2-wrong-count", "votes-non-bit", "votes-binary-non-bit"],
)
def test_invalid_inputs_with_honest_proofs_are_always_rejected(circuit, invalid):
    meas = invalid(TRIALS)
    assert not bool(circuit.valid(meas).any())  # the input really is invalid
    assert not bool(_accepts(circuit, meas).any())


VALID = {"range": (RANGE, _valid_range), "l2": (L2, _valid_l2), "one-hot": (ONE_HOT, _valid_hot), "votes": (VOTES, _valid_votes)}
INVALID = {"range": _out_of_range, "l2": _over_norm, "one-hot": _multi_hot, "votes": _bad_votes}


@pytest.mark.parametrize("name", list(VALID))
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_proof_for_another_vector_is_rejected(name):
    """A valid proof of some valid x′ presented with an invalid x (and with a different valid x)."""
    c, valid = VALID[name]
    other = _encode(c, valid(TRIALS))
    proof, jr = _prove(c, other)
    bad = INVALID[name](TRIALS)
    assert not bool(_verify(c, bad, proof, jr).any())
    mine = _encode(c, valid(TRIALS))
    differs = np.any(mine != other, axis=1)
    assert not bool(_verify(c, mine, proof, jr)[differs].any())


@pytest.mark.parametrize("name", list(VALID))
def test_proof_share_altered_at_one_node_is_rejected(name):
    c, valid = VALID[name]
    meas = _encode(c, valid(TRIALS))
    node = rng.integers(M, size=TRIALS)
    rep = rng.integers(c.proofs, size=TRIALS)
    pos = rng.integers(c.proof_len, size=TRIALS)
    delta = F.rand(TRIALS)
    delta = np.where(delta == 0, np.uint64(1), delta)

    def alter(ms, ps):
        for t in range(TRIALS):
            ps[node[t]][t, rep[t], pos[t]] = F.add(ps[node[t]][t, rep[t], pos[t]], delta[t])

    assert not bool(_accepts(c, meas, alter).any())


@pytest.mark.parametrize("name", list(VALID))
def test_forged_proof_that_zeroes_the_circuit_is_rejected(name):
    """The strongest cheat on an invalid x: shift the gadget polynomial at ω^1 by −V(x) so that the circuit's output
    is 0; only the polynomial identity at the secret query point catches it."""
    c, _ = VALID[name]
    meas = INVALID[name](TRIALS)
    proof, jr = _prove(c, meas)
    basis = F.intt(np.eye(c.n, dtype=np.uint64)[1])  # L_1: 1 at ω^1, 0 at the other n-th roots
    for j in range(c.proofs):
        a, b, lin = c._terms(meas, jr[:, j, :], np.uint64(1))
        v = F.add(F.dot(a, b), lin)  # V(x) ≠ 0
        proof[:, j, c.arity : c.arity + c.n] = F.sub(proof[:, j, c.arity : c.arity + c.n], F.mul(v[:, None], basis))
    ms, ps = _share(meas), _share(proof)
    qr = _rand(TRIALS, c.proofs)
    ver = F.sum(np.stack([c.query(ms[k], ps[k], qr, jr, M) for k in range(M)]), axis=0)
    assert bool((ver[:, :, 0] == 0).all())  # the forgery does zero V …
    assert not bool(c.decide(ver).any())  # … and is caught


@pytest.mark.parametrize("name", list(VALID))
def test_wrong_length_is_refused(name):
    c, valid = VALID[name]
    meas = _encode(c, valid(4))
    proof, jr = _prove(c, meas)
    qr = _rand(4, c.proofs)
    for bad_meas, bad_proof in ((meas[:, :-1], proof), (np.concatenate([meas, meas[:, :1]], axis=1), proof), (meas, proof[:, :, :-1])):
        with pytest.raises(flp.CircuitError):
            c.query(bad_meas, bad_proof, qr, jr, M)
    with pytest.raises(flp.CircuitError):
        c.encode([np.zeros(D + 1, dtype=np.int64)])


def test_circuits_refuse_parameters_whose_sums_could_wrap():
    with pytest.raises(flp.CircuitError):
        flp.L2Ball(2**20, 23, 1)  # d·4^(b−1) ≥ p
    with pytest.raises(flp.CircuitError):
        flp.RangeVec(4, 2**63, 0)
    with pytest.raises(flp.CircuitError):
        flp.Circuit([flp.OneHot(3), flp.RangeVec(4, 3)])  # two output lengths
    with pytest.raises(flp.CircuitError):
        flp.VoteBlocks(3, 4, count=4)  # count < classes
    with pytest.raises(flp.CircuitError):
        VOTES.encode([np.ones(Q * C, dtype=np.int64)])  # an honest prover cannot encode a four-hot point


def test_a_query_point_among_the_roots_of_unity_is_refused():
    with pytest.raises(flp.CircuitError):
        flp.lagrange_weights(8, np.array([F.root_of_unity(8)], dtype=np.uint64))
    pts = flp.query_points(RANGE, b"q", b"k" * 32, b"client")
    assert pts.shape == (RANGE.proofs,) and bool((F.pow_vec(pts, RANGE.n) != 1).all())


def test_query_points_for_many_clients_are_each_clients_own(monkeypatch):
    binders = [f"client-{i}".encode() for i in range(50)]
    many = flp.query_points_many(RANGE, b"q", b"k" * 32, binders)
    assert many.tolist() == [flp.query_points(RANGE, b"q", b"k" * 32, b).tolist() for b in binders]
    # a first draw holding an n-th root of unity (unreachable by chance) takes the general path, which skips it
    omega = np.uint64(F.root_of_unity(RANGE.n))
    real_xof = F.xof

    def planted(dst, seed, binder, n):
        out = real_xof(dst, seed, binder, n)
        if binder == binders[3] + (0).to_bytes(4, "big"):
            out[0] = omega
        return out

    real_many = F.xof_many

    def planted_many(dst, seeds, binder, n):
        out = real_many(dst, seeds, binder, n)
        for i, s in enumerate(seeds):
            if s == b"k" * 32 + binders[3] + (0).to_bytes(4, "big"):
                out[i, 0] = omega
        return out

    monkeypatch.setattr(F, "xof", planted)
    monkeypatch.setattr(F, "xof_many", planted_many)
    got = flp.query_points_many(RANGE, b"q", b"k" * 32, binders[:5])
    assert bool((F.pow_vec(got, RANGE.n) != 1).all()) and got[3].tolist() == flp.query_points(RANGE, b"q", b"k" * 32, binders[3]).tolist()
    assert got[3].tolist() != real_xof(b"q", b"k" * 32, binders[3] + (0).to_bytes(4, "big"), RANGE.proofs).tolist()


@pytest.mark.parametrize("name", ["range", "l2", "one-hot", "votes"])
def test_query_equals_the_wires_built_and_evaluated_at_the_query_point(name):
    """The fused query (wire values at r without building the wires) against the construction of BBCGGI19 Fig. 3
    step by step: every wire's values at ω^0..ω^(n−1) (seed, then the Mul inputs of each call), Lagrange-evaluated."""
    c, valid = VALID[name]
    meas = _encode(c, valid(4))
    proof, jr = _prove(c, meas)
    for share, pshare in [(meas, proof), (_rand(*meas.shape), _rand(*proof.shape))]:  # an honest share and random ones
        qr = _rand(meas.shape[0], c.proofs)
        got = c.query(share, pshare, qr, jr, M)
        inv = flp._inv(M)
        for j in range(c.proofs):
            a, b, _ = c._terms(share, jr[:, j, :], inv)
            wires = c._wire_columns(a, b, pshare[:, j, : c.arity]).swapaxes(-1, -2)  # (clients, arity, n)
            want = F.dot(wires, flp.lagrange_weights(c.n, qr[:, j])[:, None, :], axis=-1)
            assert np.array_equal(got[:, j, 1 : 1 + c.arity], want)


def _prove_reference(c: flp.Circuit, meas: np.ndarray, jr: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """BBCGGI19 Fig. 3's prover step by step, one repetition at a time: the wires (seed, then the Mul inputs of each
    call) at ω^0..ω^(n−1), their values on the coset ζ·ω^i, the gadget's 2n values, interpolated."""
    out = []
    for j in range(c.proofs):
        a, b, _ = c._terms(meas, jr[:, j, :], np.uint64(1))
        wires = c._wire_columns(a, b, seeds[:, j, :])
        coset = F.ntt(F.mul(F.intt(wires, axis=-2), F.powers(c._zeta, c.n)[:, None]), axis=-2)
        evals = np.empty((meas.shape[0], 2 * c.n), dtype=np.uint64)
        evals[:, 0::2] = F.sum(F.mul(wires[..., 0::2], wires[..., 1::2]), axis=-1)
        evals[:, 1::2] = F.sum(F.mul(coset[..., 0::2], coset[..., 1::2]), axis=-1)
        out.append(np.concatenate([seeds[:, j, :], F.intt(evals)[:, : 2 * c.n - 1]], axis=-1))
    return np.stack(out, axis=1)


@pytest.mark.parametrize("name", sorted(VALID))
def test_prove_equals_the_prover_built_step_by_step(name):
    """The fused prover (both repetitions in one pipeline, wires built in one compiled pass, coset values consumed as
    pair dots) against the plain construction, on honest measurements and on random ones (elements near p too)."""
    c, valid = VALID[name]
    honest = _encode(c, valid(3))
    near_p = (np.uint64(F.P) - rng.integers(1, 1 << 20, size=(2, c.meas_len)).astype(np.uint64)).astype(np.uint64)
    for meas in (honest, _rand(3, c.meas_len), near_p):
        rows = meas.shape[0]
        jr = _rand(rows, c.proofs, c.jr_len)
        seeds = _rand(rows, c.proofs, c.arity)
        jr[0] = np.uint64(F.P - 1)  # the largest element as every joint-randomness value of one client
        assert np.array_equal(c.prove(meas, jr, seeds), _prove_reference(c, meas, jr, seeds))

"""Fully linear proofs over Field64 (Boneh, Boyle, Corrigan-Gibbs, Gilboa & Ishai, CRYPTO 2019, §4.2; as Prio3
instantiates them in draft-irtf-cfrg-vdaf §7.3), with the validity circuits our contributions need.

Roles. A *prover* (a client) holds a measurement x ∈ F^n and proves V(x) = 0 for a public validity circuit V. The
verifiers (the compute nodes) hold additive shares of x and of the proof π; each computes a *verifier share*
(:func:`query`) that is linear in its shares, the shares are added, and :func:`decide` accepts or rejects. The
verifiers learn the verifier message only: one random evaluation of each (randomised) wire polynomial, and zero.

Circuit shape. Every measurement element is a bit (every predicate below is built from bit decompositions), and V is

  V(x; ρ) = Σ_t A_t(x)·B_t(x) + ℓ(x),

with A_t, B_t, ℓ affine in x and polynomial in the joint randomness ρ: the bit checks ρ_i·x_i·(x_i − 1), the squares
of an L2 bound, and random linear combinations of the linear constraints (sums, slack equations). The bit checks'
coefficients are powers, as Prio3SumVec's: bit i = c·j + e (e < c) gets ρ_i = α_j^(e+1), one joint-randomness element
α_j per c bits (c the gadget's chunk below), so the joint randomness is short (⌈n_bits/c⌉ + the predicates' own). The Q products are computed
by L = ⌈Q/c⌉ calls of the gadget G = ParallelSum(Mul, c) (arity 2c, degree 2): G(a_1, b_1, …, a_c, b_c) = Σ a_i·b_i.
Constants are split as const·(1/M) among M shares, so a verifier evaluates V on its share linearly.

Proof (BBCGGI19 Fig. 3, one repetition). Let n = 2^⌈log2(L + 1)⌉ and ω a primitive n-th root of unity. The prover
draws 2c wire seeds w_j, interpolates the wire polynomials f_j of degree < n with f_j(ω^0) = w_j and f_j(ω^k) = the
j-th input of gadget call k (k = 1..L, zero beyond), and sends π = (w_1..w_2c, the 2n − 1 coefficients of
p = G(f_1, …, f_2c)). A verifier reads the gadget outputs as p(ω^k), evaluates V with them, and, at a random
r ∉ {ω^i} (query randomness, unknown to the prover), outputs (V, f_1(r), …, f_2c(r), p(r)). Accept iff V = 0 and
G(f_1(r), …, f_2c(r)) = p(r).

Soundness (stated for ``proofs`` = R independent repetitions, each with its own joint and query randomness). For
one repetition: if p ≠ G∘f, the two sides differ as non-zero polynomials of degree ≤ 2(n − 1), so they agree at the
random r with probability ≤ 2(n − 1)/(|F| − n) (Schwartz–Zippel); if p = G∘f, the gadget outputs are the true
products, V(x; ρ) is a non-zero polynomial in the joint randomness (each bit's coefficient a distinct monomial α_j^e,
each other check's an independent variable) of total degree ≤ c, zero with probability ≤ c/|F| over ρ (Schwartz–
Zippel). So one repetition errs with probability ε₁ ≤ 2(n − 1)/(|F| − n) + c/|F|, and R repetitions with ε₁^R. The joint
randomness is a hash of the client's shares (Fiat–Shamir), so a client that evaluates the XOF Q times to search for a
good ρ succeeds with probability at most Q·ε₁^R (union bound over its tries). :func:`repetitions` picks the least R
≥ 3 with ε₁^R ≤ 2^-100: at most 2^-60 for any client making up to 2^40 XOF evaluations. The floor of 3 is Prio3's
advice for Field64 with joint randomness (draft-irtf-cfrg-vdaf: Field128 with one proof, or Field64 with at least
3; its multiproof test vectors run Field64 with 3): with ε₁ ≈ 2^-54…2^-58 here, two would give ≈ 2^-108…2^-116,
enough against 2^-100 but short of the ≈ 2^-128 the draft aims at against a client grinding the XOF offline. The validity of each predicate also
needs the sums below not to wrap mod p; each circuit checks its own condition at construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field as dc_field
from typing import Sequence

import numpy as np

from mpdp.math import field as F

SOUNDNESS_BITS = 100  # ε₁^R ≤ 2^-100: ≤ 2^-60 for clients making up to 2^40 XOF evaluations
MIN_PROOFS = 3  # repetitions at least: Prio3's floor for Field64 with joint randomness (module docstring)
TARGET_BITS = 60


class CircuitError(ValueError):
    """A circuit's parameters would let a sum wrap around p, or an input is not encodable."""


# -- predicates ---------------------------------------------------------------------------------------------
# Each predicate owns a slice of the measurement (bits), a slice of the joint randomness, some Mul terms and one
# random linear combination of its linear constraints; ``truncate`` maps its bits to its output values (linear).
class Predicate:
    meas_len: int = 0
    jr_len: int = 0
    quad_len: int = 0
    output_len: int = 0

    def encode(self, values: np.ndarray) -> np.ndarray:
        """The bits (int64 0/1) of an honest input."""
        raise NotImplementedError

    def encode_rows(self, values: np.ndarray) -> np.ndarray:
        """:meth:`encode` for each row of ``values`` (many inputs), shape (rows, meas_len)."""
        return np.stack([self.encode(v) for v in values]).reshape(len(values), self.meas_len)

    def quad(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)

    def linear(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> F.Elem:
        return np.uint64(0)

    def truncate(self, meas: np.ndarray, inv: F.Elem) -> np.ndarray:
        raise NotImplementedError


def _recombine(bits: np.ndarray, width: int) -> np.ndarray:
    """Σ_l 2^l·b_{j,l} for bits of shape (..., d·width) → (..., d) (linear; valid on shares)."""
    return F.recombine(bits, width)


def _bits_of(values: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` low bits of each value, least significant first, along the last axis: (..., d) → (..., d·width)."""
    v = np.asarray(values, dtype=np.int64)
    return ((v[..., None] >> np.arange(width, dtype=np.int64)) & 1).reshape(v.shape[:-1] + (-1,))


@dataclass(frozen=True)
class RangeVec(Predicate):
    """Every coordinate y_j ∈ [−offset, max_value − offset] (Prio3SumVec, with the draft's two-sided bound when the
    range is not a power of two): x_j = y_j + offset ∈ [0, 2^b) by its b bits, and, unless max_value = 2^b − 1, also
    x_j + (2^b − 1 − max_value) ∈ [0, 2^b) by another b bits, tied by one linear constraint per coordinate.
    Output: y_j (in the units of the input)."""

    d: int
    max_value: int
    offset: int = 0
    bits: int = dc_field(init=False)
    two_sided: bool = dc_field(init=False)

    def __post_init__(self) -> None:
        if self.d < 1 or self.max_value < 1 or not 0 <= self.offset <= self.max_value:
            raise CircuitError("RangeVec: d ≥ 1, max_value ≥ 1 and 0 ≤ offset ≤ max_value")
        b = int(self.max_value).bit_length()
        if b > 62:
            raise CircuitError("RangeVec: max_value must be below 2^62")
        object.__setattr__(self, "bits", b)
        object.__setattr__(self, "two_sided", self.max_value != (1 << b) - 1)

    @property
    def meas_len(self) -> int:  # type: ignore[override]
        return self.d * self.bits * (2 if self.two_sided else 1)

    @property
    def jr_len(self) -> int:  # type: ignore[override]
        return self.d if self.two_sided else 0

    @property
    def output_len(self) -> int:  # type: ignore[override]
        return self.d

    @property
    def gap(self) -> int:
        return (1 << self.bits) - 1 - self.max_value

    def encode(self, values: np.ndarray) -> np.ndarray:
        x = np.asarray(values, dtype=np.int64) + self.offset
        if x.shape != (self.d,) or bool(((x < 0) | (x > self.max_value)).any()):
            raise CircuitError("RangeVec: a value is out of range")
        return self.encode_rows(x[None, :] - self.offset)[0]

    def encode_rows(self, values: np.ndarray) -> np.ndarray:
        x = np.asarray(values, dtype=np.int64) + self.offset
        if x.ndim != 2 or x.shape[1] != self.d or bool(((x < 0) | (x > self.max_value)).any()):
            raise CircuitError("RangeVec: a value is out of range")
        parts = [_bits_of(x, self.bits)]
        if self.two_sided:
            parts.append(_bits_of(x + self.gap, self.bits))
        return np.concatenate(parts, axis=-1)

    def linear(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> F.Elem:
        if not self.two_sided:
            return np.uint64(0)
        half = self.d * self.bits
        x = _recombine(meas[..., :half], self.bits)
        y = _recombine(meas[..., half:], self.bits)
        gap = F.mul(F.scalar(self.gap), inv)
        return F.dot(jr, F.sub(F.sub(y, x), gap))  # Σ_j ρ_j·(y_j − x_j − gap) = 0

    def truncate(self, meas: np.ndarray, inv: F.Elem) -> np.ndarray:
        x = _recombine(meas[..., : self.d * self.bits], self.bits)
        return F.sub(x, F.mul(F.scalar(self.offset), inv))


@dataclass(frozen=True)
class L2Ball(Predicate):
    """‖y‖₂² ≤ bound for y ∈ Z^d with every y_j ∈ [−2^(b−1), 2^(b−1)) (b = ``entry_bits``), as libprio-rs's
    FixedPointBoundedL2VecSum: the bits of y_j + 2^(b−1), the Mul terms y_j·y_j (times ρ), and the slack
    s = bound − ‖y‖₂² ∈ [0, 2^bs) by bs = bitlen(bound) bits; the constraint Σ y_j² + s − bound = 0 holds in Z (not
    only mod p) because d·4^(b−1) + 2^bs < p (checked). Output: y_j."""

    d: int
    entry_bits: int
    bound: int
    slack_bits: int = dc_field(init=False)

    def __post_init__(self) -> None:
        if self.d < 1 or self.entry_bits < 1 or self.bound < 0:
            raise CircuitError("L2Ball: d ≥ 1, entry_bits ≥ 1, bound ≥ 0")
        sb = max(1, int(self.bound).bit_length())
        object.__setattr__(self, "slack_bits", sb)
        if self.d * 4 ** (self.entry_bits - 1) + 2**sb >= F.P:
            raise CircuitError("L2Ball: d·4^(b−1) + 2^bitlen(bound) must stay below p (the squared norm would wrap)")

    @property
    def meas_len(self) -> int:  # type: ignore[override]
        return self.d * self.entry_bits + self.slack_bits

    jr_len = 1

    @property
    def quad_len(self) -> int:  # type: ignore[override]
        return self.d

    @property
    def output_len(self) -> int:  # type: ignore[override]
        return self.d

    def encode(self, values: np.ndarray) -> np.ndarray:
        y = np.asarray(values, dtype=np.int64)
        half = 1 << (self.entry_bits - 1)
        if y.shape != (self.d,) or bool(((y < -half) | (y >= half)).any()):
            raise CircuitError("L2Ball: an entry is out of range")
        return self.encode_rows(y[None, :])[0]

    def encode_rows(self, values: np.ndarray) -> np.ndarray:
        y = np.asarray(values, dtype=np.int64)
        half = 1 << (self.entry_bits - 1)
        if y.ndim != 2 or y.shape[1] != self.d or bool(((y < -half) | (y > half - 1)).any()):
            raise CircuitError("L2Ball: an entry is out of range")
        a = np.abs(y).astype(np.uint64)
        norm2 = np.sum(a * a, axis=1, dtype=np.uint64)  # ≤ d·4^(b−1) < p < 2^64 (checked at construction): exact
        if bool((norm2 > np.uint64(self.bound)).any()):
            raise CircuitError("L2Ball: the squared norm exceeds the bound")
        slack = np.asarray(np.uint64(self.bound) - norm2, dtype=np.int64).reshape(-1, 1)  # < 2^bs ≤ 2^63
        return np.concatenate([_bits_of(y + half, self.entry_bits), _bits_of(slack, self.slack_bits)], axis=-1)

    def _entries(self, meas: np.ndarray, inv: F.Elem) -> np.ndarray:
        x = _recombine(meas[..., : self.d * self.entry_bits], self.entry_bits)
        return F.sub(x, F.mul(F.scalar(1 << (self.entry_bits - 1)), inv))

    def quad(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> tuple[np.ndarray, np.ndarray]:
        y = self._entries(meas, inv)
        return F.mul(y, jr[..., :1]), y

    def linear(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> F.Elem:
        s = _recombine(meas[..., self.d * self.entry_bits :], self.slack_bits)[..., 0]
        return F.mul(jr[..., 0], F.sub(s, F.mul(F.scalar(self.bound), inv)))

    def truncate(self, meas: np.ndarray, inv: F.Elem) -> np.ndarray:
        return self._entries(meas, inv)


@dataclass(frozen=True)
class OneHot(Predicate):
    """x ∈ {0, 1}^d with Σ x_j = 1 (Prio3Histogram): the bits themselves and one linear constraint. Output:
    scale·x_j."""

    d: int
    scale: int = 1

    def __post_init__(self) -> None:
        if self.d < 1 or not 1 <= self.scale < 2**62:
            raise CircuitError("OneHot: d ≥ 1 and 1 ≤ scale < 2^62")

    @property
    def meas_len(self) -> int:  # type: ignore[override]
        return self.d

    jr_len = 1

    @property
    def output_len(self) -> int:  # type: ignore[override]
        return self.d

    def encode(self, values: np.ndarray) -> np.ndarray:
        x = np.asarray(values, dtype=np.int64)
        if x.shape != (self.d,) or bool(((x != 0) & (x != 1)).any()) or int(x.sum()) != 1:
            raise CircuitError("OneHot: not a one-hot vector")
        return x

    def linear(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> F.Elem:
        return F.mul(jr[..., 0], F.sub(F.sum(meas, axis=-1), inv))

    def truncate(self, meas: np.ndarray, inv: F.Elem) -> np.ndarray:
        return F.mul(meas, F.scalar(self.scale))


@dataclass(frozen=True)
class VoteBlocks(Predicate):
    """A vote vector of ``blocks`` query points: per point a block of ``classes`` class entries that are bits and sum
    to the voter's public ``count`` (1: one classifier's single vote; k: k votes, each class at most once). The bits
    are checked like every measurement element; the block sums by one random linear combination
    Σ_j ρ_j·(Σ_k x_jk − count) = 0, exact in Z because a block sum is at most classes < p. Binary votes (classes 2,
    count 1) are held as v_j = x_j1 alone: the block (1 − v_j, v_j) sums to 1 by construction, so the bit check is
    the whole predicate (a signed vote s_j ∈ {−1, +1} is v_j = (1 + s_j)/2). Output: scale·x (the class entries)."""

    blocks: int
    classes: int
    count: int = 1
    scale: int = 1

    def __post_init__(self) -> None:
        if self.blocks < 1 or self.classes < 2 or not 1 <= self.count < self.classes or not 1 <= self.scale < 2**62:
            raise CircuitError("VoteBlocks: blocks ≥ 1, classes ≥ 2, 1 ≤ count < classes and 1 ≤ scale < 2^62")

    @property
    def width(self) -> int:
        return 1 if self.classes == 2 else self.classes

    @property
    def meas_len(self) -> int:  # type: ignore[override]
        return self.blocks * self.width

    @property
    def jr_len(self) -> int:  # type: ignore[override]
        return 0 if self.width == 1 else self.blocks

    @property
    def output_len(self) -> int:  # type: ignore[override]
        return self.meas_len

    def encode(self, values: np.ndarray) -> np.ndarray:
        x = np.asarray(values, dtype=np.int64)
        if x.shape != (self.meas_len,) or bool(((x != 0) & (x != 1)).any()):
            raise CircuitError("VoteBlocks: not a vector of vote bits")
        if self.width > 1 and bool((x.reshape(self.blocks, self.width).sum(axis=1) != self.count).any()):
            raise CircuitError("VoteBlocks: a point's votes do not add up to the voter's count")
        return x

    def linear(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> F.Elem:
        if self.width == 1:
            return np.uint64(0)
        sums = F.sum(meas.reshape(meas.shape[:-1] + (self.blocks, self.width)), axis=-1)
        return F.dot(jr, F.sub(sums, F.mul(F.scalar(self.count), inv)))  # Σ_j ρ_j·(Σ_k x_jk − count) = 0

    def truncate(self, meas: np.ndarray, inv: F.Elem) -> np.ndarray:
        return F.mul(meas, F.scalar(self.scale))


# -- the circuit ----------------------------------------------------------------------------------------------
class Circuit:
    """Predicates side by side over one measurement (their bits concatenated), every bit checked, their outputs
    added coordinate-wise (they must share one output length, or have none). The gadget is ParallelSum(Mul, c) with
    c ≈ √Q, so the proof and the verifier message have O(√Q) elements (BBCGGI19 §5.2, Prio3's chunk length)."""

    def __init__(self, predicates: Sequence[Predicate]) -> None:
        if not predicates:
            raise CircuitError("a circuit needs at least one predicate")
        self.predicates = tuple(predicates)
        outs = {p.output_len for p in self.predicates if p.output_len}
        if len(outs) > 1:
            raise CircuitError("predicates with outputs must share one output length")
        self.output_len = outs.pop() if outs else 0
        self.meas_len = sum(p.meas_len for p in self.predicates)
        self.quad_len = self.meas_len + sum(p.quad_len for p in self.predicates)
        self.chunk = max(1, math.isqrt(self.quad_len - 1) + 1)
        self.calls = -(-self.quad_len // self.chunk)
        self.n = 1 << (self.calls + 1 - 1).bit_length()  # n ≥ calls + 1, a power of two
        self.arity = 2 * self.chunk
        self.bit_jr_len = -(-self.meas_len // self.chunk)  # α_j: the bit checks' coefficients are its powers
        self.jr_len = self.bit_jr_len + sum(p.jr_len for p in self.predicates)  # then each predicate's own
        self.proofs = repetitions(self.n, self.chunk)
        self.proof_len = self.arity + 2 * self.n - 1  # per repetition
        self.verifier_len = self.arity + 2  # per repetition: V, f_1(r)..f_2c(r), p(r)
        self._zeta = F.root_of_unity(2 * self.n)  # ζ: the prover evaluates the wire polynomials at ζ·ω^i too

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Circuit) and self.predicates == other.predicates

    def __hash__(self) -> int:
        return hash(self.predicates)

    # -- structure --------------------------------------------------------------------------------------
    def _slices(self, arr: np.ndarray, lens: list[int]) -> list[np.ndarray]:
        out, at = [], 0
        for n in lens:
            out.append(arr[..., at : at + n])
            at += n
        return out

    def encode(self, values: Sequence[np.ndarray]) -> np.ndarray:
        """The measurement (field elements, all bits) for one input per predicate."""
        if len(values) != len(self.predicates):
            raise CircuitError(f"one input per predicate: {len(self.predicates)} expected")
        return np.concatenate([p.encode(v) for p, v in zip(self.predicates, values)]).astype(np.uint64)

    def encode_rows(self, values: Sequence[np.ndarray]) -> np.ndarray:
        """:meth:`encode` for many inputs: one (rows, ·) array per predicate → (rows, meas_len)."""
        if len(values) != len(self.predicates):
            raise CircuitError(f"one input per predicate: {len(self.predicates)} expected")
        return np.concatenate([p.encode_rows(v) for p, v in zip(self.predicates, values)], axis=-1).astype(np.uint64)

    def _terms(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(A, B, ℓ): the Mul terms padded to calls·chunk, and the linear part, of V on (a share of) meas.
        Leading axes of ``meas`` and ``jr`` are batch axes (many clients at once)."""
        alphas = jr[..., : self.bit_jr_len]
        bit_rho = F.powers_of(alphas, self.chunk + 1)[..., 1:]  # ρ_(c·j+e) = α_j^(e+1)
        bit_rho = bit_rho.reshape(bit_rho.shape[:-2] + (-1,))[..., : self.meas_len]
        a_extra, b_extra, lin = self._predicate_terms(meas, jr, inv)
        batch = lin.shape
        a_parts = [F.mul(bit_rho, meas), a_extra]  # ρ_i·x_i·(x_i − 1): bit checks
        b_parts = [F.sub(meas, inv), b_extra]
        pad = self.calls * self.chunk - self.quad_len
        zeros = np.zeros(batch + (pad,), dtype=np.uint64)
        a_all = np.concatenate([np.broadcast_to(x, batch + x.shape[-1:]) for x in a_parts] + [zeros], axis=-1)
        b_all = np.concatenate([np.broadcast_to(x, batch + x.shape[-1:]) for x in b_parts] + [zeros], axis=-1)
        return a_all, b_all, lin

    def _predicate_terms(self, meas: np.ndarray, jr: np.ndarray, inv: F.Elem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The predicates' own part of V (everything but the bit checks): their Mul operands (A, B) of quad index
        meas_len.. quad_len − 1, shape batch + (quad_len − meas_len,), and the linear part ℓ, shape batch."""
        metas = self._slices(meas, [p.meas_len for p in self.predicates])
        rhos = self._slices(jr[..., self.bit_jr_len :], [p.jr_len for p in self.predicates])
        batch = np.broadcast_shapes(meas.shape[:-1], jr.shape[:-1])
        a_parts, b_parts = [np.zeros(batch + (0,), dtype=np.uint64)], [np.zeros(batch + (0,), dtype=np.uint64)]
        lin = np.zeros(batch, dtype=np.uint64)
        for p, m, r in zip(self.predicates, metas, rhos):
            if p.quad_len:
                a, b = p.quad(m, r, inv)
                a_parts.append(np.broadcast_to(a, batch + a.shape[-1:]))
                b_parts.append(np.broadcast_to(b, batch + b.shape[-1:]))
            lin = F.add(lin, p.linear(m, r, inv))
        return np.concatenate(a_parts, axis=-1), np.concatenate(b_parts, axis=-1), np.broadcast_to(lin, batch)

    def _wire_columns(self, a: np.ndarray, b: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """Wire values (..., n, arity): row 0 the seeds, row k the inputs of call k (a_i, b_i interleaved)."""
        batch = a.shape[:-1]
        w = np.zeros(batch + (self.n, self.arity), dtype=np.uint64)
        w[..., 0, :] = seeds
        w[..., 1 : self.calls + 1, 0::2] = a.reshape(batch + (self.calls, self.chunk))
        w[..., 1 : self.calls + 1, 1::2] = b.reshape(batch + (self.calls, self.chunk))
        return w

    def truncate(self, meas: np.ndarray, num_shares: int = 1) -> np.ndarray:
        """The output (a share of it, from a share of meas), shape (..., output_len): Σ over predicates with outputs."""
        meas = np.asarray(meas, dtype=np.uint64)
        inv = _inv(num_shares)
        out = np.zeros(meas.shape[:-1] + (self.output_len,), dtype=np.uint64)
        for p, m in zip(self.predicates, self._slices(meas, [p.meas_len for p in self.predicates])):
            if p.output_len:
                out = F.add(out, p.truncate(m, inv))
        return out

    def valid(self, meas: np.ndarray) -> np.ndarray:
        """V(meas) = 0 at a fresh random ρ, computed in the clear (tests); batch axes allowed."""
        meas = np.asarray(meas, dtype=np.uint64)
        jr = F.rand(int(np.prod(meas.shape[:-1], dtype=np.int64)) * self.jr_len).reshape(meas.shape[:-1] + (self.jr_len,))
        a, b, lin = self._terms(meas, jr, np.uint64(1))
        return F.add(F.dot(a, b), lin) == 0

    # -- the proof system -----------------------------------------------------------------------------
    def prove(self, meas: np.ndarray, joint_rand: np.ndarray, prove_rand: np.ndarray) -> np.ndarray:
        """π for R repetitions: meas (..., meas_len), joint_rand (..., R, jr_len), prove_rand (..., R, arity) (the
        wire seeds: fresh and secret). Returns (..., R, proof_len)."""
        meas = np.asarray(meas, dtype=np.uint64)
        batch = meas.shape[:-1]
        self._check_shapes(meas, joint_rand)
        if np.shape(prove_rand) != batch + (self.proofs, self.arity):
            raise CircuitError("prove_rand must have shape (..., proofs, arity)")
        rows = int(np.prod(batch, dtype=np.int64))
        flat = meas.reshape(rows, self.meas_len)
        jr = np.asarray(joint_rand, dtype=np.uint64).reshape(rows, self.proofs, self.jr_len)
        seeds = np.asarray(prove_rand, dtype=np.uint64).reshape(rows, self.proofs, self.arity)
        # both repetitions in one pipeline: the wires built in one compiled pass from the measurement (the bit checks'
        # operands ρ·x and x − 1 formed on the fly), then one coset transform and pair-dot pass over all of them
        a_extra, b_extra, _ = self._predicate_terms(flat[:, None, :], jr, np.uint64(1))
        wires = F.prove_wires(flat, jr[..., : self.bit_jr_len], a_extra, b_extra, seeds, self.n, self.chunk)  # f_1..f_2c at ω^i
        gadget_evals = np.empty((rows, self.proofs, 2 * self.n), dtype=np.uint64)  # G(f) = Σ_i f_2i·f_2i+1 at ζ^0..ζ^(2n−1)
        gadget_evals[..., 0::2] = F.pair_dots(wires)
        gadget_evals[..., 1::2] = F.coset_pair_dots(wires, self._zeta)  # at ζ·ω^i, ζ a primitive 2n-th root (ζ² = ω); each f_j of degree < n
        poly = F.intt(gadget_evals)  # degree ≤ 2(n − 1): the last coefficient is 0
        out = np.empty((rows, self.proofs, self.proof_len), dtype=np.uint64)
        out[..., : self.arity] = seeds
        out[..., self.arity :] = poly[..., : 2 * self.n - 1]
        return out.reshape(batch + (self.proofs, self.proof_len))

    def query(self, meas_share: np.ndarray, proof_share: np.ndarray, query_rand: np.ndarray, joint_rand: np.ndarray, num_shares: int) -> np.ndarray:
        """One verifier's share of the verifier message, (..., R, verifier_len); linear in (meas_share, proof_share).
        query_rand (..., R): none an n-th root of unity (see :func:`query_points`)."""
        meas_share = np.asarray(meas_share, dtype=np.uint64)
        batch = meas_share.shape[:-1]
        self._check_shapes(meas_share, joint_rand)
        if np.shape(proof_share) != batch + (self.proofs, self.proof_len) or np.shape(query_rand) != batch + (self.proofs,):
            raise CircuitError("proof share or query randomness of the wrong shape")
        inv = _inv(num_shares)
        rows = int(np.prod(batch, dtype=np.int64))
        flat = meas_share.reshape(rows, self.meas_len)
        jr = np.asarray(joint_rand, dtype=np.uint64).reshape(rows, self.proofs, self.jr_len)
        proof = np.asarray(proof_share, dtype=np.uint64).reshape(rows, self.proofs, self.proof_len)
        r = np.asarray(query_rand, dtype=np.uint64).reshape(rows, self.proofs)
        seeds, coeffs = proof[..., : self.arity], proof[..., self.arity :]
        # the predicates' own terms per repetition (their joint randomness differs); the bit checks fused below
        a_extra, b_extra, lin = self._predicate_terms(flat[:, None, :], jr, inv)
        folded = coeffs[..., : self.n].copy()  # p mod (x^n − 1): the same values at the n-th roots
        folded[..., : self.n - 1] = F.add(folded[..., : self.n - 1], coeffs[..., self.n :])
        outs = F.ntt(folded)[..., 1 : self.calls + 1]  # p(ω^k): the gadget outputs of calls 1..L
        out = np.empty((rows, self.proofs, self.verifier_len), dtype=np.uint64)
        out[..., 0] = F.add(F.sum(outs, axis=-1), lin)
        # f_i(r) = Σ_k f_i(ω^k)·ℓ_k(r), the wires' values taken from (meas, jr, seeds) without building the wires
        out[..., 1 : 1 + self.arity] = F.wire_evals(flat, jr[..., : self.bit_jr_len], a_extra, b_extra, seeds,
                                                    lagrange_weights(self.n, r), int(inv), self.chunk)
        out[..., -1] = F.dot(coeffs, F.powers_of(r, 2 * self.n - 1), axis=-1)
        return out.reshape(batch + (self.proofs, self.verifier_len))

    def decide(self, verifier: np.ndarray) -> np.ndarray:
        """Accept iff, for every repetition, V = 0 and G(f(r)) = p(r) (on the sum of the verifier shares);
        a boolean per batch entry."""
        verifier = np.asarray(verifier, dtype=np.uint64)
        if verifier.shape[-2:] != (self.proofs, self.verifier_len):
            raise CircuitError("a verifier message of the wrong shape")
        v, f_r, p_r = verifier[..., 0], verifier[..., 1 : 1 + self.arity], verifier[..., -1]
        g = F.sum(F.mul(f_r[..., 0::2], f_r[..., 1::2]), axis=-1)
        return np.all((v == 0) & (g == p_r), axis=-1)

    def _check_shapes(self, meas: np.ndarray, jr: np.ndarray) -> None:
        if meas.shape[-1:] != (self.meas_len,):
            raise CircuitError(f"the measurement must have {self.meas_len} elements, got {meas.shape[-1:]}")
        if np.shape(jr) != meas.shape[:-1] + (self.proofs, self.jr_len):
            raise CircuitError("joint randomness must have shape (..., proofs, jr_len)")

    @property
    def soundness_log2(self) -> float:
        """log2 of ε₁^R (see the module docstring)."""
        return self.proofs * math.log2(one_repetition_error(self.n, self.chunk))


def _inv(num_shares: int) -> F.Elem:
    if num_shares < 1:
        raise CircuitError("num_shares ≥ 1")
    return np.uint64(pow(num_shares, F.P - 2, F.P))


def one_repetition_error(n: int, rho_degree: int = 1) -> float:
    """ε₁ = 2(n − 1)/(|F| − n) + D/|F|, D the joint randomness's degree in V (the chunk c; module docstring)."""
    return 2 * (n - 1) / (F.P - n) + rho_degree / F.P


def repetitions(n: int, rho_degree: int = 1) -> int:
    """The least R ≥ MIN_PROOFS with ε₁^R ≤ 2^-SOUNDNESS_BITS."""
    return max(MIN_PROOFS, math.ceil(SOUNDNESS_BITS / -math.log2(one_repetition_error(n, rho_degree))))


def lagrange_weights(n: int, r: np.ndarray) -> np.ndarray:
    """ℓ_i(r) for the points ω^i, i < n, shape r.shape + (n,): f(r) = Σ_i f(ω^i)·ℓ_i(r) with
    ℓ_i(r) = ω^i·(r^n − 1)/(n·(r − ω^i)). No r may be an n-th root of unity."""
    r = np.asarray(r, dtype=np.uint64)
    rn1 = F.sub(F.pow_vec(r, n), np.uint64(1))
    if bool((rn1 == 0).any()):
        raise CircuitError("a query point is an n-th root of unity")
    pts = F.powers(F.root_of_unity(n), n)
    den = F.mul(F.sub(r[..., None], pts), F.scalar(n))
    inv_den = F.batch_inv(den.reshape(-1)).reshape(den.shape)  # one exponentiation (Montgomery's trick)
    return F.mul(F.mul(pts, inv_den), rn1[..., None])


def query_points(circuit: Circuit, dst: bytes, seed: bytes, binder: bytes) -> np.ndarray:  # one client
    """R query points from the XOF, none an n-th root of unity (such a draw is skipped, as the draft does)."""
    out: list[int] = []
    counter = 0
    while len(out) < circuit.proofs:
        cand = F.xof(dst, seed, binder + counter.to_bytes(4, "big"), circuit.proofs)
        out += [int(x) for x in cand if pow(int(x), circuit.n, F.P) != 1]
        counter += 1
    return np.array(out[: circuit.proofs], dtype=np.uint64)


def query_points_many(circuit: Circuit, dst: bytes, seed: bytes, binders: Sequence[bytes]) -> np.ndarray:
    """:func:`query_points` for many binders, shape (len(binders), R): the first XOF draw of every binder checked in one
    vectorised step; a binder whose first draw holds an n-th root of unity (probability ≈ R·n/p) takes the general path."""
    if not binders:
        return np.zeros((0, circuit.proofs), dtype=np.uint64)
    zero = (0).to_bytes(4, "big")
    first = F.xof_many(dst, [seed + b + zero for b in binders], b"", circuit.proofs)  # = xof(dst, seed, b ‖ 0, R) per binder
    roots = np.any(F.pow_vec(first, circuit.n) == 1, axis=-1)
    for i in np.flatnonzero(roots).tolist():
        first[i] = query_points(circuit, dst, seed, binders[i])
    return first

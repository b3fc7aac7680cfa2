"""DGK secure comparison on plaintext inputs (Damgård, Geisler & Krøigaard 2007), output to B or to A.

Hazmat. A holds x, B holds y, both in [0, 2^ℓ); B owns the DGK key. B learns δ = [x < y]
(or, in the output-to-A variant, A learns it); A sees only ciphertexts, B sees zeros or
uniformly random non-zero residues in random order. Signed inputs: add 2^(ℓ−1) to both.

Steps (bits indexed 0 = least significant):
  2. B → A: [[y_i]] for i = 0..ℓ−1.
  3. A: [[w_i]] = [[x_i ⊕ y_i]] = [[y_i]] if x_i = 0 else [[1]]·[[y_i]]⁻¹.
  4. A: [[c_i]] = [[σ + x_i − y_i + 3·Σ_{j>i} w_j]] with σ = 1 (output to B); c_i = 0 exactly at
     the most significant differing bit when x < y; otherwise 0 < |c_i| ≤ 3ℓ − 1 < u.
  5. A: [[c_i]]^{ρ_i}·h^r with ρ_i uniform in [1, u−1], shuffled, → B.
  6. B: δ = 1 iff some c_i decrypts to 0.
Output to A: A draws δ_A, uses σ_A = 1 − 2δ_A in place of 1 and appends c_{−1} = δ_A + Σ_j w_j
(for equality); B returns δ_B = "a zero exists", and [y < x] = 1 ⊕ δ_A ⊕ δ_B... see
:func:`a_result`.
"""

from __future__ import annotations

from typing import Protocol

from mpdp.math.dgk import DgkKeyPair, DgkPublicKey
from mpdp.math.drbg import Drbg
from mpdp.math.opcount import OpCounter


class _FactorSource(Protocol):
    def take(self) -> int: ...


def bits_of(v: int, length: int) -> list[int]:
    if not 0 <= v < (1 << length):
        raise ValueError(f"comparison input {v} is outside [0, 2^{length})")
    return [(v >> i) & 1 for i in range(length)]


def b_encrypt_bits(key: DgkKeyPair, y: int, length: int, rng: Drbg, ops: OpCounter | None = None, *, factors: _FactorSource | None = None) -> list[int]:
    """Step 2 (B): [[y_i]] for i = 0..ℓ−1; with ``factors`` (precomputed h^r), g^{y_i}·h^r, one multiplication each."""
    if factors is None:
        return [key.encrypt_fast(b, rng, ops) for b in bits_of(y, length)]
    pk = key.public
    return [pk.encrypt(b, factor=factors.take(), ops=ops) for b in bits_of(y, length)]


def a_blinded_terms(
    pk: DgkPublicKey,
    x: int,
    enc_y_bits: list[int],
    rng: Drbg,
    blinding: _FactorSource,
    *,
    sigma: int = 1,
    equality_term: int | None = None,
    ops: OpCounter | None = None,
) -> list[int]:
    """Steps 3–5 (A): the blinded, re-randomised, shuffled [[c_i]] list for B.

    ``sigma`` is 1 for output to B, or 1 − 2δ_A for output to A; ``equality_term`` = δ_A
    appends c_{−1} = δ_A + Σ_j w_j (output-to-A variant).
    """
    length = len(enc_y_bits)
    xb = bits_of(x, length)
    one = pk.g  # [[1]] with r = 0; every term is re-randomised before it leaves A
    terms: list[int] = []
    run = 1  # Π_{j>i} [[w_j]], starting empty
    for i in range(length - 1, -1, -1):
        ey = enc_y_bits[i]
        ey_inv = pk.inverse(ey)
        ew = ey if xb[i] == 0 else pk.mul(one, ey_inv)
        base = pk.power(pk.g, sigma + xb[i])  # [[σ + x_i]]
        c = pk.mul(pk.mul(base, ey_inv), pk.mul(run, pk.mul(run, run)))
        terms.append(c)
        run = pk.mul(run, ew)
    if equality_term is not None:
        terms.append(pk.mul(pk.power(pk.g, equality_term), run))
    out = []
    for c in terms:
        rho = 1 + rng.randbelow(pk.u - 1)
        out.append(pk.mul(pk.power(c, rho), blinding.take()))
        if ops is not None:
            ops.tick("dgk_blind")
    perm = rng.permutation(len(out))
    return [out[p] for p in perm]


def b_result(key: DgkKeyPair, terms: list[int], ops: OpCounter | None = None) -> int:
    """Step 6 (B): 1 if any term decrypts to zero."""
    return int(any(key.is_zero(c, ops) for c in terms))


def a_result(delta_a: int, delta_b: int) -> int:
    """Output-to-A variant: [x ≤ y]... precisely [y < x] = 1 ⊕ δ_A ⊕ δ_B, so [x ≤ y] = δ_A ⊕ δ_B."""
    return 1 ^ delta_a ^ delta_b

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

import gmpy2

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
    n, g = gmpy2.mpz(pk.n), gmpy2.mpz(pk.g)
    ys = [gmpy2.mpz(c) for c in enc_y_bits]
    ys_inv = batch_inverse(ys, n)  # [[−y_i]]: one inversion for all ℓ bits
    g_pow = {e: gmpy2.powmod(g, e % pk.u, n) for e in (sigma, sigma + 1)}  # [[σ + x_i]], x_i ∈ {0, 1}
    terms: list[gmpy2.mpz] = []
    run = gmpy2.mpz(1)  # Π_{j>i} [[w_j]], starting empty
    for i in range(length - 1, -1, -1):
        ew = ys[i] if xb[i] == 0 else g * ys_inv[i] % n  # [[x_i ⊕ y_i]]; [[1]] = g with r = 0 (re-randomised below)
        c = g_pow[sigma + xb[i]] * ys_inv[i] % n * (run * run % n * run % n) % n  # [[σ + x_i − y_i + 3·Σ_{j>i} w_j]]
        terms.append(c)
        run = run * ew % n
    if equality_term is not None:
        terms.append(gmpy2.powmod(g, equality_term % pk.u, n) * run % n)
    out = []
    for c in terms:
        rho = 1 + rng.randbelow(pk.u - 1)
        out.append(int(gmpy2.powmod(c, rho, n) * blinding.take() % n))
        if ops is not None:
            ops.tick("dgk_blind")
    perm = rng.permutation(len(out))
    return [out[p] for p in perm]


def batch_inverse(values: list, n) -> list:
    """Every v⁻¹ mod n with one inversion (Montgomery's trick: prefix products, then back); ZeroDivisionError if
    some v has no inverse, as gmpy2.invert."""
    prefix = []
    acc = gmpy2.mpz(1)
    for v in values:
        prefix.append(acc)
        acc = acc * v % n
    inv = gmpy2.invert(acc, n)
    out = [gmpy2.mpz(0)] * len(values)
    for k in range(len(values) - 1, -1, -1):
        out[k] = inv * prefix[k] % n  # (v_0…v_k)⁻¹ · v_0…v_{k−1} = v_k⁻¹
        inv = inv * values[k] % n
    return out


def b_result(key: DgkKeyPair, terms: list[int], ops: OpCounter | None = None) -> int:
    """Step 6 (B): 1 if any term decrypts to zero."""
    return int(any(key.is_zero(c, ops) for c in terms))


def a_result(delta_a: int, delta_b: int) -> int:
    """Output-to-A variant: [x ≤ y]... precisely [y < x] = 1 ⊕ δ_A ⊕ δ_B, so [x ≤ y] = δ_A ⊕ δ_B."""
    return 1 ^ delta_a ^ delta_b

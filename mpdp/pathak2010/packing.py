"""Slot packing of the noise vector in Stages 2–3 (docs/protocols/pathak2010.md, "Packed noise").

d coordinates travel in ⌈d/S⌉ ζ ciphertexts of S slots of B bits each (:meth:`PathakParams.noise_slots`):
slot k of a block holds coordinate i = S·block + k at weight 2^(kB). The homomorphic step is the same per
coordinate as unpacked, ζ(m)^{v_i}, only on the base ζ(m)^{2^(kB)} = ζ(m·2^(kB)); P1's mask and Charlie's
decryption then work per block. Every slot's value η̄_i + s_i lies in (0, 2^B) and S·B < bits(N′), so the
block's plaintext Σ_k (η̄_i + s_i)·2^(kB) is an integer below N′: no carry crosses a slot and nothing wraps,
and Charlie reads exactly the d values η̄_i + s_i he decrypted one by one before.
"""

from __future__ import annotations

import gmpy2

from mpdp.math.opcount import OpCounter
from mpdp.math.paillier import PublicKey


def blocks(values: list[int], slots: int) -> list[list[int]]:
    return [values[i : i + slots] for i in range(0, len(values), slots)]


GROUP = 5  # bases per subset-product table in scalar_powers: 2^5 products each, ⌈S/5⌉ multiplications per bit


def _subset_products(bases: list, n2) -> list:
    """T[s] = Π_{i: bit i of s set} bases[i] mod n2 for every s < 2^len(bases)."""
    table = [gmpy2.mpz(1)] * (1 << len(bases))
    for s in range(1, len(table)):
        low = s & -s
        table[s] = table[s ^ low] * bases[low.bit_length() - 1] % n2
    return table


def scalar_powers(key: PublicKey, c: int, values: list[int], slot_bits: int, slots: int, ops: OpCounter | None = None) -> list[int]:
    """ζ(m·Σ_k v_k·2^(kB)) per block of ``slots`` values, from c = ζ(m): Π_k (c^(2^(kB)))^(v_k), signed v_k.
    Deterministic in c: the caller re-randomises each block before it leaves.

    One simultaneous multi-exponentiation per block (Straus's method; Handbook of Applied Cryptography, Alg. 14.88)
    instead of one powmod per slot: the S bases b_k = c^(2^(kB)) are shared by every block, so, in groups of
    ``GROUP`` consecutive bases, the products T_g[s] = Π_{k∈s} b_k over each group's subsets s are computed once, and a
    block costs one squaring and ⌈S/GROUP⌉ multiplications per exponent bit. Signed exponents are made non-negative with an offset, v_k + 2^m ≥ 1 (|v_k| < 2^m), and the
    offset is removed at the end by (Π_k b_k)^(−2^m), one per block width. The result equals the per-slot product.
    """
    n2 = key.nsquare
    width = min(slots, len(values))
    bases = [gmpy2.mpz(c)]
    step = gmpy2.mpz(1) << slot_bits
    for _ in range(1, width):
        bases.append(gmpy2.powmod(bases[-1], step, n2))
    groups = [bases[g : g + GROUP] for g in range(0, width, GROUP)]
    tables = [_subset_products(group, n2) for group in groups]  # T_g[s]; bit i of s is base g·GROUP + i
    m = max((abs(v) for v in values), default=0).bit_length()
    offset = 1 << m
    undo: dict[int, gmpy2.mpz] = {}  # (Π_{k<w} b_k)^(−2^m) per block width w
    out: list[int] = []
    for block in blocks(values, slots):
        if ops is not None:
            ops.tick("paillier_scalar_mul", len(block))
        e = [v + offset for v in block]  # in [1, 2^(m+1)): bits m..0
        parts = [(table, e[g : g + GROUP]) for table, g in zip(tables, range(0, len(e), GROUP))]
        acc = gmpy2.mpz(1)
        for bit in range(m, -1, -1):
            acc = acc * acc % n2
            for table, part in parts:
                index = 0
                for i, ek in enumerate(part):
                    index |= ((ek >> bit) & 1) << i
                acc = acc * table[index] % n2
        w = len(block)
        if w not in undo:
            full = gmpy2.mpz(1)
            for b in bases[:w]:
                full = full * b % n2
            undo[w] = gmpy2.invert(gmpy2.powmod(full, offset, n2), n2)
        out.append(int(acc * undo[w] % n2))
    return out


def pack(values: list[int], slot_bits: int) -> int:
    """Σ_k v_k·2^(kB) for non-negative v_k < 2^B."""
    total = 0
    for k, v in enumerate(values):
        total |= v << (k * slot_bits)
    return total


def unpack(plain: int, count: int, slot_bits: int) -> list[int] | None:
    """The ``count`` B-bit slots of a block's plaintext, or None if it has bits above them (not a packed block)."""
    if plain >> (count * slot_bits):
        return None
    mask = (1 << slot_bits) - 1
    return [(plain >> (k * slot_bits)) & mask for k in range(count)]

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


def scalar_powers(key: PublicKey, c: int, values: list[int], slot_bits: int, slots: int, ops: OpCounter | None = None) -> list[int]:
    """ζ(m·Σ_k v_k·2^(kB)) per block of ``slots`` values, from c = ζ(m): Π_k (c^(2^(kB)))^(v_k), signed v_k.
    Deterministic in c: the caller re-randomises each block before it leaves."""
    n2 = key.nsquare
    width = min(slots, len(values))
    bases = [gmpy2.mpz(c)]
    step = gmpy2.mpz(1) << slot_bits
    for _ in range(1, width):
        bases.append(gmpy2.powmod(bases[-1], step, n2))
    inverses: list[gmpy2.mpz | None] = [None] * width
    out: list[int] = []
    for block in blocks(values, slots):
        acc = gmpy2.mpz(1)
        for k, v in enumerate(block):
            if ops is not None:
                ops.tick("paillier_scalar_mul")
            if v == 0:
                continue
            if v < 0:
                inv = inverses[k]
                if inv is None:
                    inv = inverses[k] = gmpy2.invert(bases[k], n2)
                acc = acc * gmpy2.powmod(inv, -v, n2) % n2
            else:
                acc = acc * gmpy2.powmod(bases[k], v, n2) % n2
        out.append(int(acc))
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

"""Packed noise (docs/protocols/pathak2010.md, "Packed noise"): d coordinates in ⌈d/S⌉ ζ ciphertexts give the very
release of the unpacked protocol, in both noise modes, and Charlie refuses a block with bits above its slots."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.math.drbg import Drbg
from mpdp.math.paillier import KeyPair
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010 import driver, mechanism, packing, tester
from mpdp.pathak2010.params import PathakParams
from tests.pathak_helpers import run_test_job

D = 17  # > the slots of a 768-bit key in either mode: several blocks and a partial last one


def _data(sizes: list[int], seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    g = np.random.default_rng(seed)  # public simulation data
    out = {}
    for i, n in enumerate(sizes):
        X = g.normal(size=(n, D))
        out[f"p{i + 1}"] = (X, np.where(X[:, 0] + 0.5 * g.normal(size=n) > 0, 1.0, -1.0))
    return out


def test_scalar_powers_pack_signed_exponents() -> None:
    key = KeyPair.generate(512)
    pk, rng = key.public, Drbg.from_seed(b"pack")
    values = [5, -3, 0, 2**40 - 1, -(2**40) + 7, 11, -1]
    width, slots, m = 48, 3, 9
    c = pk.encrypt(m, rng)
    got = packing.scalar_powers(pk, c, values, width, slots)
    assert len(got) == 3
    for b, ct in enumerate(got):
        block = values[b * slots : (b + 1) * slots]
        assert key.decrypt(ct) == sum(m * v << (k * width) for k, v in enumerate(block)) % pk.n
    assert packing.unpack(packing.pack([1, 2**48 - 1, 7], 48), 3, 48) == [1, 2**48 - 1, 7]
    assert packing.unpack(1 << 144, 3, 48) is None


@pytest.mark.parametrize("count", [1, 4, 9, 14, 15])
def test_multi_exponentiation_equals_one_powmod_per_slot(count: int) -> None:
    """The per-block multi-exponentiation gives the product of the per-slot powers for signed, zero and
    all-zero exponents, full blocks and a partial last one."""
    assert packing.GROUP < 7
    key = KeyPair.generate(512)
    pk, rng = key.public, Drbg.from_seed(b"straus")
    n2 = pk.nsquare
    c = pk.encrypt(7, rng)
    width, slots = 40, 7  # two subset-product groups (packing.GROUP = 5), one of them partial
    for values in ([rng.randbelow(1 << 30) - (1 << 29) for _ in range(count)], [0] * count, [-1] * count):
        want = []
        for b in range(0, count, slots):
            acc = 1
            for k, v in enumerate(values[b : b + slots]):
                acc = acc * pow(pow(c, 1 << (k * width), n2), v, n2) % n2
            want.append(acc)
        assert packing.scalar_powers(pk, c, values, width, slots) == want


@pytest.mark.parametrize("mode", ["corrected", "gaussian-distributed"])
def test_packed_release_equals_the_plaintext_mechanism(small_secrets, mode: str) -> None:
    data = _data([31, 44, 27, 38], seed=5)
    seed = f"packed-{mode}".encode()
    r = run_test_job(data, driver.make_spec(list(data), 1.0, 0.3, mode, seed), small_secrets, party_key_bits=768)
    assert r.error is None and r.model is not None, r.error
    prm: PathakParams = r.curator.params
    bits = small_secrets.paillier.public.bits
    assert prm.noise_blocks(D, bits) >= 2 and D % prm.noise_slots(bits) != 0
    root = Drbg.from_seed(seed)
    cal = prm.calibration
    draw = mechanism.draw_aggregate([r.parties[n].w for n in data], [r.parties[n].n for n in data], cal, [mechanism.party_rng(root, n) for n in data])
    bound = (len(data) / 2 + 1.01) / len(data) * 2.0**-prm.frac_bits if cal.distributed else len(data) * 2.0**-32
    assert r.model.dimension == D and np.max(np.abs(tester.rebuild(r.model) - draw.weights)) <= bound


def test_a_block_with_bits_above_its_slots_is_malformed(small_secrets) -> None:
    data = _data([20, 30], seed=6)
    zeta = small_secrets.paillier.public

    def overflow(sender, to, msg):
        if isinstance(msg, pb.MaskedNoise):
            prm = PathakParams.from_spec("x", driver.make_spec(list(data), 1.0, 0.3, "corrected"))
            top = 1 << (prm.noise_slots(zeta.bits) * prm.noise_slot_bits)
            msg.ciphertexts[0] = zeta.to_bytes(zeta.encrypt(top + 5, Drbg.from_seed(b"o")))
        return msg

    r = run_test_job(data, driver.make_spec(list(data), 1.0, 0.3, "corrected", b"overflow"), small_secrets, party_key_bits=768, tamper=overflow)
    assert r.model is None and r.curator.state == "FAILED" and r.error is not None
    assert r.error.problem == common_pb2.MALFORMED


def test_crt_random_factor_is_the_public_one() -> None:
    """KeyPair.random_factor (Charlie for ζ, every party for ξ) gives r^N mod N² for the very r the public
    method draws from the same generator state: the ciphertexts' distribution is unchanged."""
    key = KeyPair.generate(512)
    for i in range(8):
        seed = f"crt-{i}".encode()
        f = key.random_factor(Drbg.from_seed(seed))
        assert f == key.public.random_factor(Drbg.from_seed(seed))
        assert key.decrypt(key.public.encrypt(1234, factor=f)) == 1234


@pytest.mark.parametrize("case", ["n_squared", "zero", "zero_slot", "extra_block", "chain_extra_block", "chain_n_squared"])
def test_out_of_range_blocks_are_malformed(small_secrets, case: str) -> None:
    """A block ≥ N² or 0, a slot holding 0 (outside (0, 2^B)), one block too many in MaskedNoise or in a
    NoiseChain link: each fails the job MALFORMED, never decodes into a release."""
    data = _data([20, 30, 25], seed=7)
    zeta = small_secrets.paillier.public

    def hostile(sender, to, msg):
        if case.startswith("chain") != isinstance(msg, pb.NoiseChain) or not isinstance(msg, (pb.MaskedNoise, pb.NoiseChain)):
            return msg
        if case in ("n_squared", "chain_n_squared"):
            msg.ciphertexts[0] = zeta.nsquare.to_bytes(zeta.ciphertext_bytes, "big")
        elif case == "zero":
            msg.ciphertexts[0] = bytes(zeta.ciphertext_bytes)
        elif case == "zero_slot":
            msg.ciphertexts[0] = zeta.to_bytes(zeta.encrypt(0, Drbg.from_seed(b"z")))
        else:
            msg.ciphertexts.append(msg.ciphertexts[0])
        return msg

    r = run_test_job(data, driver.make_spec(list(data), 1.0, 0.3, "corrected", b"hostile"), small_secrets, party_key_bits=768, tamper=hostile)
    assert r.model is None and r.error is not None
    assert r.error.problem == common_pb2.MALFORMED

"""Where a Pathak job's time goes: CPU per role and step (warm pools, one process) and the public-key unit costs.

    python benchmarks/pathak2010_profile.py [--parties 5] [--dimension 123] [--key-bits 2048] [--json FILE]

One job runs through the in-memory driver with every randomness pool filled and P1's ξ made beforehand, as in
a warm federation; each machine step is timed (its public-key operations plus Python overhead, no transport).
The unit costs (r^N, decryption, short exponentiation, packed ψ, DGK bit encryption, leader's blinding and
Charlie's zero test) times the job's operation counts give the public-key floor per stage; the socket benchmark
(benchmarks/pathak2010_protocol.py) minus these step times is transport, scheduling and waiting.
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path
from typing import Any, Callable

from mpdp.math import comparison
from mpdp.math.dgk import DgkBlindingPool, DgkKeyPair
from mpdp.math.drbg import Drbg
from mpdp.math.paillier import KeyPair
from mpdp.pathak2010 import driver, packing
from mpdp.pathak2010.params import PathakParams
from mpdp.pathak2010.resources import CuratorSecrets, PartyResources
from mpdp.protocol import Machine
from mpdp_services.operator.pathak2010 import make_spec
from pathak2010_protocol import parts  # the socket benchmark's data (this script's folder is on sys.path)


def _ms(f: Callable[[], Any], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e3


def unit_costs(bits: int, params: PathakParams, d: int) -> dict[str, float]:
    """Milliseconds per public-key operation at ``bits`` (one core)."""
    rng = Drbg.from_os()
    key, dgk = KeyPair.generate(bits), DgkKeyPair.generate(bits)
    pk = key.public
    c = pk.encrypt(1, rng)
    noise = [((-1) ** i) * ((1 << 33) + 7 * i) for i in range(d)]
    ell = params.compare_bits
    cts = comparison.b_encrypt_bits(dgk, 12345, ell, rng)
    pool = DgkBlindingPool(dgk.public, rng)
    pool.fill(3 * ell)
    terms = comparison.a_blinded_terms(dgk.public, 999, cts, rng, pool)
    return {
        "paillier_r^N": _ms(lambda: pk.random_factor(rng), 10),
        "paillier_r^N_crt": _ms(lambda: key.random_factor(rng), 10),
        "paillier_decrypt": _ms(lambda: key.decrypt(c), 30),
        "paillier_short_pow": _ms(lambda: pk.mul_plain(c, (1 << 34) - 12345), 100),
        "packed_psi_per_party": _ms(lambda: packing.scalar_powers(pk, c, noise, params.noise_slot_bits, params.noise_slots(pk.bits)), 3),
        "dgk_encrypt_bit": _ms(lambda: comparison.b_encrypt_bits(dgk, 12345, ell, rng), 2) / ell,
        "dgk_blind_term": _ms(lambda: comparison.a_blinded_terms(dgk.public, 999, cts, rng, pool), 2) / ell,
        "dgk_zero_test": _ms(lambda: comparison.b_result(dgk, terms), 3) / ell,
    }


def step_times(K: int, d: int, bits: int) -> tuple[dict[str, float], dict[str, int]]:
    """CPU milliseconds per (role, state, message that completed the step) of one warm job, and its op counts."""
    secrets = CuratorSecrets.generate(bits, bits)
    spare = [KeyPair.generate(bits)]
    create = PartyResources.create.__func__  # type: ignore[attr-defined]

    def warm(cls, rng, keys, key_bits, *, test_mode=False):
        res = create(cls, rng, keys, key_bits, test_mode=test_mode)
        res.zeta_pool.fill(2 * d + 8)
        res.dgk_pool.fill(K * (K - 1) // 2 * 120)
        res.party_key_source = spare.pop
        return res

    times: collections.Counter[str] = collections.Counter()
    receive = Machine.receive

    def timed(self, sender, msg):
        state, t0 = self.state, time.perf_counter()
        try:
            return receive(self, sender, msg)
        finally:
            times[f"{self.ROLE} {state} ({type(msg).__name__})"] += (time.perf_counter() - t0) * 1e3

    PartyResources.create = classmethod(warm)  # type: ignore[method-assign, assignment]
    Machine.receive = timed  # type: ignore[method-assign]
    try:
        data = {f"party-{i + 1}": p for i, p in enumerate(parts(K, d))}
        r = driver.run_job(data, make_spec("bench", list(data), 1.0, 0.01, "corrected"), secrets, party_key_bits=bits, test_mode=bits < 2048)
    finally:
        PartyResources.create = classmethod(create)  # type: ignore[method-assign, assignment]
        Machine.receive = receive  # type: ignore[method-assign]
    if r.model is None:
        raise SystemExit(f"job failed: {r.error}")
    return dict(times), dict(r.model.paillier_ops)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parties", type=int, default=5)
    ap.add_argument("--dimension", type=int, default=123)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    K, d, bits = args.parties, args.dimension, args.key_bits
    params = PathakParams.from_spec("profile", make_spec("bench", [f"p{i}" for i in range(K)], 1.0, 0.01, "corrected"))
    units = unit_costs(bits, params, d)
    steps, ops = step_times(K, d, bits)
    print(f"K={K} d={d} {bits}-bit; op counts: {', '.join(f'{k}={v}' for k, v in sorted(ops.items()))}")
    print("\nunit costs (ms, one core)")
    for k, v in units.items():
        print(f"  {v:9.3f}  {k}")
    print("\nCPU per machine step (ms, warm pools, no transport; summed over parties for party steps)")
    for k, v in sorted(steps.items(), key=lambda kv: -kv[1]):
        print(f"  {v:9.1f}  {k}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"K": K, "d": d, "key_bits": bits, "units_ms": units, "steps_ms": steps, "ops": ops}, indent=2))


if __name__ == "__main__":
    main()

"""The Pathak 2010 protocol over the in-memory driver.

Invariants checked here:
- the output equals the plaintext mechanism (1/K)·Σŵ_j + η_{j*} within 2^−f, any delivery order;
- the index Charlie finds maps back to argmin n_j (ties, K = 1, 2, 5, all permutations for small K);
- only the smallest party's noise survives (sentinel test), and the indicator has exactly one 1;
- shares and masks: a_j + b_j = n_j, ã + b̃ = π2(π1(n)), the re-shared z_t sum to K·ŵ_s;
- transcripts: Charlie never receives n_j, unmasked a_j, ŵ_j, η_j or π1; no party receives another's ŵ_j or n_j;
- any refused message from a participant moves a role to FAILED and nothing is published; an outsider's
  message, or one naming another job, is refused and leaves the role as it was (tests/core/test_failure_policy.py).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mpdp.dp.pathak_noise import PathakCalibration
from mpdp.learn import logreg
from mpdp.math import sharing
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010 import packing
from mpdp.pathak2010.driver import make_spec
from tests.pathak_helpers import party_data, run_test_job as run_job
from mpdp.pathak2010.mechanism import draw_aggregate, local_model, party_rng
from mpdp.pathak2010.party import round_scaled
from mpdp.pathak2010.tester import rebuild
from mpdp.protocol import Peer


def _data(sizes, d=4, seed=0):
    return party_data(sizes, d, seed)


def _reference(data, mode, eps, lam, seed):
    names = list(data)
    cal = PathakCalibration(mode, eps, lam, len(names))
    models = [local_model(logreg.clip_rows(data[n][0]), data[n][1], cal) for n in names]
    return draw_aggregate(models, [len(data[n][1]) for n in names], cal, [party_rng(Drbg.from_seed(seed), n) for n in names])


@pytest.mark.parametrize("sizes", [[37], [30, 45], [40, 25, 33], [21, 50, 34, 28, 44]])
@pytest.mark.parametrize("mode", ["corrected", "paper"])
def test_output_equals_plaintext_mechanism(small_secrets, sizes, mode):
    data = _data(sizes, seed=len(sizes))
    seed = f"eq-{mode}-{len(sizes)}".encode()
    r = run_job(data, make_spec(list(data), 0.7, 0.05, mode, seed), small_secrets, party_key_bits=768, order=Drbg.from_seed(1))
    assert r.error is None and r.model is not None
    ref = _reference(data, mode, 0.7, 0.05, seed)
    assert np.max(np.abs(rebuild(r.model) - ref.weights)) <= len(sizes) * 2.0**-32
    assert r.model.seeded and r.model.guarantee.statement


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_argmin_all_permutations_and_ties(small_secrets):
    for sizes in list(itertools.permutations([11, 12, 13])) + [(12, 12, 15), (15, 12, 12), (9, 9, 9), (20, 14)]:
        data = _data(list(sizes), d=2, seed=3)
        r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"argmin"), small_secrets, party_key_bits=768)
        assert r.error is None
        names = list(data)
        winners = [n for n in names if r.parties[n].noise is not None and _selected(r, n)]
        assert len(winners) == 1
        assert len(data[winners[0]][1]) == min(sizes)


def _selected(r, name) -> bool:
    """Whether party `name`'s noise reached the output: the decrypted selection bit v_j (test-only view via keys)."""
    m = r.parties[name]
    sel = next(msg for s, msg in m.transcript if isinstance(msg, pb.SelectionVector))
    ct = int.from_bytes(sel.ciphertexts[m.pi1[m.j]], "big")
    v = r.curator.res.secrets.paillier.decrypt(ct)
    assert v in (0, 1)
    return v == 1


def test_sentinel_noise_never_reaches_output(small_secrets, monkeypatch):
    """Non-smallest parties draw an unmistakable noise 10^6; the output carries exactly the smallest party's η."""
    data = _data([30, 20, 40], d=3, seed=5)
    real_draw = PathakCalibration.draw

    def draw(self, rng, n, d):
        return real_draw(self, rng, n, d) if n == 20 else np.full(d, 1e6)

    monkeypatch.setattr(PathakCalibration, "draw", draw)
    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"sentinel"), small_secrets, party_key_bits=768)
    assert r.error is None
    w = rebuild(r.model)
    avg = np.mean([r.parties[n].w for n in data], axis=0)
    assert np.max(np.abs(w - avg)) < 1e3  # no 10^6 sentinel anywhere
    assert np.allclose(w - avg, r.parties["p2"].noise, atol=1e-8)


def test_share_and_mask_invariants(small_secrets):
    data = _data([25, 35, 30], d=3, seed=6)
    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"inv"), small_secrets, party_key_bits=768)
    assert r.error is None
    names = list(data)
    n = [len(data[x][1]) for x in names]
    leader = r.parties[names[0]]
    pi1 = leader.pi1
    # a_j + b_j = n_j: a_j from the SizeShare each holder received, b_j decrypted from the shuffled remainders
    zeta = r.curator.res.secrets.paillier
    rem = next(m for s, m in r.curator.transcript if isinstance(m, pb.SizeRemainders))
    b_by_pos = [zeta.decrypt_signed(int.from_bytes(c, "big")) for c in rem.ciphertexts]
    for j, name in enumerate(names):
        holder = r.parties[names[pi1[j]]]
        a = int.from_bytes(next(m for s, m in holder.transcript if isinstance(m, pb.SizeShare) and s.name == name).a, "big") if pi1[j] != j else None
        if a is not None:
            assert a + b_by_pos[pi1[j]] == n[j]
    # ã + b̃ = π2(π1(n))
    a_tilde = [int.from_bytes(next(m for s, m in leader.transcript if isinstance(m, pb.MaskedSize) and s.name == x).value, "big") for x in names[1:]]
    own = next(m for s, m in leader.transcript if isinstance(m, pb.MaskedSizeShare))  # the leader's own ã was self-delivered
    a_tilde.insert(0, leader.party_key.decrypt(int.from_bytes(own.ciphertext, "big")))
    expected = sharing.apply_permutation(r.curator._pi2, sharing.apply_permutation(pi1, n))
    assert [a + b for a, b in zip(a_tilde, r.curator._b_tilde)] == expected
    # z_t sum to K·ŵ_s and each share alone looks nothing like it
    q = 1 << 128
    z = [sharing.unpack_ring(s, 128, 3) for s in r.model.shares]
    assert len(z) == 4
    total = sharing.combine(z, q)
    w = rebuild(r.model)
    assert np.allclose(np.array([x - q if x >= q // 2 else x for x in total]) / 2.0**32 / 3, w)


def _ints_in(message) -> set[int]:
    """Every integer a role could read off a message: varints, byte strings as big-endian, and ring words."""
    out: set[int] = set()
    for field, value in message.ListFields():
        if hasattr(value, "items"):
            vals = list(value.values())
        elif isinstance(value, (bytes, str, int, float)) or hasattr(value, "ListFields"):
            vals = [value]
        else:
            vals = list(value)
        for v in vals:
            if isinstance(v, bytes):
                out.add(int.from_bytes(v, "big"))
                if len(v) % 16 == 0:
                    out.update(int.from_bytes(v[i : i + 16], "big") for i in range(0, len(v), 16))
            elif isinstance(v, int):
                out.add(v)
            elif hasattr(v, "ListFields"):
                out |= _ints_in(v)
    return out


def test_transcripts_hide_sizes_models_noise_and_pi1(small_secrets):
    data = _data([26, 39, 31], d=3, seed=7)
    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"transcript"), small_secrets, party_key_bits=768)
    assert r.error is None
    names = list(data)
    sizes = {len(data[x][1]) for x in names}
    q = 1 << 128
    model_words = {x % q for n in names for x in r.parties[n].params.ring.to_int(r.parties[n].w, 2.0**40)}
    noise_words = {x % q for n in names if r.parties[n].noise is not None for x in r.parties[n].params.ring.to_int(r.parties[n].noise, 2.0**32)}
    noise_words |= {round_scaled(float(x), 32, times=len(names)) % q for n in names if r.parties[n].noise is not None for x in r.parties[n].noise}  # η̄ as sent
    a_values = {int.from_bytes(m.a, "big") for n in names for s, m in r.parties[n].transcript if isinstance(m, pb.SizeShare)}
    # What Charlie received, plus everything he can decrypt with sk′ (b's and η̄ + s).
    zeta = r.curator.res.secrets.paillier
    seen: set[int] = set()
    for sender, m in r.curator.transcript:
        assert sender.role == "party"
        assert not isinstance(m, (pb.PartySecrets, pb.NoiseChain, pb.SizeShare, pb.MaskedSize))  # π1, ψ_j chain, a_j, ã never reach Charlie
        seen |= _ints_in(m)
        if isinstance(m, (pb.SizeRemainders, pb.MaskedNoise)):
            seen |= {zeta.decrypt(int.from_bytes(c, "big")) for c in m.ciphertexts}
        if isinstance(m, pb.MaskedNoise):  # and every slot of the packed η̄ + s
            prm, slots = r.curator.params, r.curator.params.noise_slots(zeta.public.bits)
            for b, c in enumerate(m.ciphertexts):
                seen |= set(packing.unpack(zeta.decrypt(int.from_bytes(c, "big")), min(slots, r.curator.d - b * slots), prm.noise_slot_bits) or [])
    assert not (seen & sizes)
    assert not (seen & a_values)
    assert not (seen & model_words)
    assert not (seen & noise_words)
    # Parties: nobody receives another party's ŵ_j or n_j.
    for n in names:
        got: set[int] = set()
        for sender, m in r.parties[n].transcript:
            got |= _ints_in(m)
        others_models = {x % q for o in names if o != n for x in r.parties[o].params.ring.to_int(r.parties[o].w, 2.0**40)}
        assert not (got & others_models)
        assert not (got & ({len(data[o][1]) for o in names if o != n} - {len(data[n][1])}))


def test_remote_errors_fail_the_job_and_publish_nothing(small_secrets):
    data = _data([20, 30, 25], d=2, seed=8)

    def bad_remainders(sender, to, msg):
        if isinstance(msg, pb.SizeRemainders):
            del msg.ciphertexts[0]
        return msg

    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"bad"), small_secrets, party_key_bits=768, tamper=bad_remainders)
    assert r.model is None and r.curator.state == "FAILED"
    assert r.error.problem == common_pb2.MALFORMED
    assert all(m.state == "FAILED" for m in r.parties.values())
    assert all(e.get("status") != "released" and len(entries) <= 1 for entries in r.ledger.values() for e in entries)

    # out of order: MaskedNoise delivered to Charlie while he awaits acceptances
    from mpdp.pathak2010.curator import CuratorMachine
    from mpdp.pathak2010.params import PathakParams
    from mpdp.pathak2010.resources import CuratorResources
    from mpdp.protocol import RemoteProtocolError

    spec = make_spec(list(data), 1.0, 0.1, "corrected")
    cm = CuratorMachine(PathakParams.from_spec("j", spec), spec, {}, CuratorResources(Drbg.from_seed(1), small_secrets, True))
    cm.start()
    with pytest.raises(RemoteProtocolError) as e:
        cm.receive(Peer("party", "p1"), pb.MaskedNoise(job_id="j"))
    assert e.value.problem == common_pb2.STEP_OUT_OF_ORDER and cm.state == "FAILED"
    with pytest.raises(RemoteProtocolError):
        cm.receive(Peer("party", "p1"), pb.JobAcceptance(job_id="j", dimension=2))  # FAILED stays FAILED


def test_replay_wrong_sender_and_unknown_job_are_refused(small_secrets):
    from mpdp.pathak2010.curator import CuratorMachine
    from mpdp.pathak2010.params import PathakParams
    from mpdp.pathak2010.resources import CuratorResources
    from mpdp.protocol import RemoteProtocolError

    spec = make_spec(["p1", "p2"], 1.0, 0.1, "corrected")

    def fresh():
        cm = CuratorMachine(PathakParams.from_spec("j", spec), spec, {}, CuratorResources(Drbg.from_seed(1), small_secrets, True))
        cm.start()
        return cm

    cm = fresh()
    cm.receive(Peer("party", "p1"), pb.JobAcceptance(job_id="j", dimension=2, pi1_commitment=bytes(32)))
    with pytest.raises(RemoteProtocolError) as e:
        cm.receive(Peer("party", "p1"), pb.JobAcceptance(job_id="j", dimension=2, pi1_commitment=bytes(32)))
    assert e.value.problem == common_pb2.REPLAY
    assert cm.state == "FAILED"  # a participant's replay fails the job closed
    for sender, msg, problem, fails in [
        (Peer("party", "stranger"), pb.JobAcceptance(job_id="j", dimension=2), common_pb2.WRONG_ROLE, False),  # an outsider
        (Peer("party", "p1"), pb.JobAcceptance(job_id="other", dimension=2), common_pb2.UNKNOWN_JOB, False),  # another job's
        (Peer("party", "p2"), pb.SizeRemainders(job_id="j"), common_pb2.WRONG_ROLE, True),  # only the leader forwards remainders
        (Peer("party", "p1"), pb.MaskedSizeShare(job_id="j"), common_pb2.WRONG_ROLE, True),  # a party-bound message
    ]:
        cm = fresh()
        with pytest.raises(RemoteProtocolError) as e:
            cm.receive(sender, msg)
        assert e.value.problem == problem, (msg, e.value)
        assert cm.state == ("FAILED" if fails else "AWAIT_ACCEPTANCES")


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_fuzzed_messages_give_protocol_errors_only(small_secrets):
    """Any corrupted message yields a ProtocolError (never another exception) and no release."""
    from mpdp.protocol import ProtocolError

    data = _data([20, 28, 24], d=2, seed=9)
    g = Drbg.from_seed(10)
    for trial in range(12):
        target = trial

        def corrupt(sender, to, msg, count=[0]):
            count[0] += 1
            if count[0] == 5 + target * 3:
                raw = bytearray(msg.SerializeToString())
                for _ in range(3):
                    if raw:
                        raw[g.randbelow(len(raw))] ^= 1 << g.randbelow(8)
                try:
                    return type(msg).FromString(bytes(raw))
                except Exception:
                    return type(msg)(job_id=getattr(msg, "job_id", ""))
            return msg

        # run_job turns failures into r.error and refusals into r.rejections; any other exception escapes and fails this test
        r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"fuzz"), small_secrets, party_key_bits=768, tamper=corrupt)
        assert r.error is None or r.model is None
        if r.error is not None:
            assert isinstance(r.error, ProtocolError) and r.curator.state == "FAILED"
        if r.model is None and r.error is None:
            # a flipped job id makes the message another job's: refused without touching this job, which then
            # waits (a served job fails at its deadline); any other refusal of a participant's message fails it
            assert [e.problem for _, _, e in r.rejections] == [common_pb2.UNKNOWN_JOB] and not r.curator.terminal


def test_curator_refuses_a_dimension_above_the_limit(small_secrets):
    """JobAcceptance.dimension is bounded by limits.MAX_PATHAK_DIMENSION (its row in the limits table): parties that
    agree on a larger d fail the job MALFORMED instead of sizing Charlie's per-call deadlines to decades."""
    from mpdp.limits import MAX_PATHAK_DIMENSION
    from mpdp.pathak2010.curator import CuratorMachine
    from mpdp.pathak2010.params import PathakParams
    from mpdp.pathak2010.resources import CuratorResources
    from mpdp.protocol import Peer, RemoteProtocolError

    spec = make_spec(["p1", "p2"], 1.0, 0.1, "corrected")
    cm = CuratorMachine(PathakParams.from_spec("j", spec), spec, {}, CuratorResources(Drbg.from_seed(1), small_secrets, True))
    cm.start()
    with pytest.raises(RemoteProtocolError) as e:
        cm.receive(Peer("party", "p1"), pb.JobAcceptance(job_id="j", dimension=MAX_PATHAK_DIMENSION + 1))
    assert e.value.problem == common_pb2.MALFORMED and cm.state == "FAILED"


def test_charlies_selection_vector_takes_its_factors_from_his_zeta_pool(small_secrets, monkeypatch):
    """S2.1's K encryptions under ζ use Charlie's precomputed r^N′ factors when he has a pool (the curator service
    fills one between jobs), and the release is the same function of the job's inputs."""
    from mpdp.math.paillier import RandomnessPool
    from mpdp.pathak2010 import driver as driver_mod
    from mpdp.pathak2010.resources import CuratorResources

    data = _data([20, 30, 25], d=2, seed=12)
    spec = make_spec(list(data), 1.0, 0.1, "corrected", b"zeta-pool")
    plain = run_job(data, spec, small_secrets, party_key_bits=768)
    pools: list[RandomnessPool] = []

    def with_pool(*args, **kwargs):
        pool = RandomnessPool(small_secrets.paillier.public, Drbg.from_seed("zeta-pool"), small_secrets.paillier.random_factor)
        pool.fill(len(data) + 1)
        pools.append(pool)
        return CuratorResources(*args, **kwargs, zeta_pool=pool)

    monkeypatch.setattr(driver_mod, "CuratorResources", with_pool)
    pooled = run_job(data, spec, small_secrets, party_key_bits=768)
    assert len(pools) == 1 and len(pools[0]) == 1 and pools[0].misses == 0  # K factors taken, none drawn on demand
    assert list(pooled.model.shares) == list(plain.model.shares)
    sel = [m for s, m in pooled.parties[list(data)[1]].transcript if isinstance(m, pb.SelectionVector)][0]
    plain_sel = [m for s, m in plain.parties[list(data)[1]].transcript if isinstance(m, pb.SelectionVector)][0]
    assert list(sel.ciphertexts) != list(plain_sel.ciphertexts)
    sk = small_secrets.paillier
    assert [sk.decrypt(sk.public.from_bytes(c)) for c in sel.ciphertexts] == [sk.decrypt(sk.public.from_bytes(c)) for c in plain_sel.ciphertexts]


def test_a_partys_refills_wait_for_the_delay_after_its_job_and_report_not_ready(small_secrets):
    """A party resumes its precompute once its jobs are over, but refills only after the delay (its job's other
    parties may still be in the job's last steps), and reports its pools not ready from the resume on."""
    from mpdp.pathak2010.resources import PartyResources
    from mpdp_services.party.precompute import Precompute

    now = [100.0]
    states: list[bool] = []
    res = PartyResources.create(Drbg.from_seed("pre"), small_secrets.public, 768, test_mode=True)
    pre = Precompute(res, 768, 4, states.append, clock=lambda: now[0])
    try:
        pre.pause()
        pre.resume(4, 10, delay=1.0)
        assert states and states[-1] is False
        assert pre.wait_left() == 1.0
        now[0] += 0.25
        assert pre.wait_left() == 0.75
        now[0] += 1.0
        assert pre.wait_left() == 0.0
    finally:
        pre.stop()

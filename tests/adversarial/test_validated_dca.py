"""A malicious client in a validated DCA job (``--validate range``), over real processes and mutual TLS.

Mallory (a PARTY certificate of the federation's CA) follows the protocol's message format but puts 10^9 into her
first coordinate: the bits of her measurement no longer are bits, and her proof — computed honestly on that input —
cannot make the circuit vanish. She streams her shares to the three compute nodes with a raw stub. A second attacker
sends a validated share one element short. Expected:

- the short share is refused at the node (MALFORMED, a clean detail) and its client counts as missing;
- Mallory's shares are taken (they are well formed) but every node rejects her proof alike: she is left out of A
  and counted in ``clients_rejected``, never named;
- a router's ShareBatch (no proofs) is refused (MALFORMED) without harming the job; a router's validated cohort
  (one ClientShare per client) releases;
- the job releases (N = 5, T = 2: two missing) and its release is the honest clients' sum within its noise, nowhere
  near 10^9; the verify key that seeds the nodes' query randomness is never shown to a client (GetJob);
- a one-hot job rejects a two-hot and an empty vote and a voter's exact shares replayed under a new id, refuses the
  same shares sent again under their own id (REPLAY: the voter counts once) and a measurement or proof of the wrong
  length (MALFORMED: that client is missing, not rejected); an l2 job rejects an over-norm vector (its slack bits
  wrapped) and a proof share altered at one node;
- clients add no noise (the compute nodes do): a job whose every client sends its bare ỹ through raw stubs is still
  noised, and its release states who added the noise and that dropouts remove none;
- in one more job every other class — out of range, a proof share altered at one node, a proof made for another
  client id — is rejected by every node alike, while a raw client sending its bare ỹ is accepted.
"""

from __future__ import annotations

import asyncio
import math

import grpc
import numpy as np

from mpdp.dca import validation
from mpdp.dca.params import DcaParams
from mpdp.math import field as F, flp
from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import submit_cohort, submit_vector

from tests.adversarial.conftest import (job_host, dca_release, client_ledger,
    NODES,
    assert_all_serving,
    assert_status,
    channel,
    create_dca,
    dca_spec,
    mint,
    operator_curator,
    refused,
    spec_digest_of,
    wait_dca,
)

D, N, T, F_BITS = 3, 5, 2, 16
HONEST = ["honest-1", "honest-2", "honest-3"]


def _announcement(fed, tls, job: str) -> dca_pb2.DcaJobAnnouncement:
    with channel(fed, "curator", tls) as ch:
        return dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=30)


def _stream(fed, tls, node: str, shares: list[dca_pb2.ClientShare]) -> dca_pb2.ShareReceipt:
    """Stream raw shares to a node, each bound to the job's spec as the curator shows it (the digest every share carries)."""
    for s in shares:
        s.spec_digest = spec_digest_of(fed, s.job_id)
    with channel(fed, node, tls) as ch:
        return dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter(shares), timeout=30)


def _mallory_shares(params: DcaParams, job: str, cid: str) -> list[dca_pb2.ValidatedShare]:
    """Shares of an input whose coordinate 0 reads 10^9 (its lowest 'bit' holds 10^9·2^f), with an honest proof of it."""
    plan = params.validation
    assert plan is not None
    meas = validation.encode_input(plan, np.zeros(D, dtype=np.int64)).astype(np.uint64)
    meas[0] = F.scalar(10**9 * 2**F_BITS + int(meas[0]))
    return [dca_pb2.ValidatedShare(measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts)
            for s in validation.client_shares(plan, job, cid, meas, params.M, seeded=False)]


def test_a_client_sending_1e9_is_rejected_counted_and_the_job_releases_the_honest_sum(fed):
    spec = dca_spec(n=N, d=D, deadline=15.0, max_missing=T, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_RANGE, fractional_bits=F_BITS,
                    sensitivity=2.0)
    job = create_dca(fed, spec)
    mallory, shorty = mint(fed, "party", "mallory"), mint(fed, "party", "mallory-short")
    ann = _announcement(fed, mallory, job)
    assert ann.spec.validate == dca_pb2.VALIDATE_RANGE and ann.verify_key == b""  # the key is the nodes' alone
    params = DcaParams.from_spec(job, ann.spec)

    # the honest clients, through the product's client
    ep = Endpoints.load(fed.workdir)
    Z = np.random.default_rng(7).uniform(-0.8, 0.8, (len(HONEST), D))
    for cid, z in zip(HONEST, Z):
        rep = asyncio.run(submit_vector(ep, mint(fed, "party", cid), cid, job, z, ledger=client_ledger(fed, cid)))
        assert not rep.rejected

    # a share one element short: refused at its node, nothing taken
    short = _mallory_shares(params, job, "mallory-short")
    short[0].measurement = short[0].measurement[:-8]
    receipt = _stream(fed, shorty, NODES[0], [dca_pb2.ClientShare(job_id=job, client_id="mallory-short", validated=short[0])])
    assert receipt.accepted == 0 and [r.problem for r in receipt.rejected] == [common_pb2.MALFORMED]
    assert len(receipt.rejected[0].detail) < 300 and "mallory" not in receipt.rejected[0].detail

    # Mallory: well-formed shares of an invalid input, to every node
    for k, share in enumerate(_mallory_shares(params, job, "mallory")):
        receipt = _stream(fed, mallory, NODES[k], [dca_pb2.ClientShare(job_id=job, client_id="mallory", validated=share)])
        assert receipt.accepted == 1, receipt

    st = wait_dca(fed, job, timeout=120)
    assert st.state == "RELEASED", st
    with operator_curator(fed) as ch:
        r = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca
    assert (r.clients_included, r.clients_rejected, r.validate) == (len(HONEST), 1, dca_pb2.VALIDATE_RANGE)
    assert "mallory" not in str(r)
    err = np.array(r.values) - Z.sum(axis=0)
    assert np.all(np.abs(err) <= 6 * math.sqrt(r.noise_variance) + len(HONEST) * 2.0**-F_BITS), (err, r.noise_variance)
    assert np.max(np.abs(r.values)) < 1e3  # nowhere near 10^9
    assert_all_serving(fed)


def test_a_validated_job_refuses_unvalidated_shares(fed):
    """A plain masked vector (the unvalidated wire format) is refused, with a clean detail."""
    job = create_dca(fed, dca_spec(n=3, d=D, deadline=5.0, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_ONE_HOT, fractional_bits=F_BITS,
                                   sensitivity=2.0))
    tls = mint(fed, "party", "plain")
    receipt = _stream(fed, tls, NODES[1], [dca_pb2.ClientShare(job_id=job, client_id="plain", masked_vector=bytes(8 * D))])
    assert receipt.accepted == 0 and [r.problem for r in receipt.rejected] == [common_pb2.MALFORMED]
    assert "validated" in receipt.rejected[0].detail
    st = wait_dca(fed, job, timeout=60)  # nobody else submits: the job fails at its deadline, nothing released
    assert st.state == "FAILED" and st.problem == common_pb2.INSUFFICIENT_NOISE, st


def test_a_router_batch_into_a_validated_job_is_refused_cleanly(fed):
    """ShareBatch carries no proofs: a validated job refuses it (MALFORMED), with a clean detail, and the job lives on."""
    job = create_dca(fed, dca_spec(n=3, d=D, deadline=30.0, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_RANGE, fractional_bits=F_BITS,
                                   sensitivity=2.0))
    ep = Endpoints.load(fed.workdir)
    batch = dca_pb2.ShareBatch(job_id=job, spec_digest=spec_digest_of(fed, job), client_ids=["r-1", "r-2"], masked_vectors=bytes(16 * D))
    with channel(fed, NODES[0], ep.tls) as ch:
        e = refused(lambda: dca_pb2_grpc.ComputeNodeStub(ch).SubmitShareBatch(batch, timeout=30))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, "r-1")
    # the job is still open: three honest clients through the product's client release it
    Z = np.random.default_rng(11).uniform(-0.5, 0.5, (3, D))
    rep = asyncio.run(submit_cohort(ep, ep.tls, job, ["v-1", "v-2", "v-3"], Z))
    assert rep.accepted == 3 * len(NODES) and not rep.rejected
    st = wait_dca(fed, job, timeout=120)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == 3, st


def _shares_of(params: DcaParams, job: str, cid: str, meas: np.ndarray, bind_as: str | None = None) -> list[dca_pb2.ValidatedShare]:
    plan = params.validation
    assert plan is not None
    return [dca_pb2.ValidatedShare(measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts)
            for s in validation.client_shares(plan, job, bind_as or cid, meas.astype(np.uint64), params.M, seeded=False)]


def _bits(v: int, width: int) -> list[int]:
    return [(v >> j) & 1 for j in range(width)]


def test_every_malicious_class_is_rejected_alike_and_a_raw_honest_client_is_accepted(fed):
    """One job, N = 8, T = 4: three honest clients; one raw client sending its bare ỹ (what every client of a
    validated job sends: the nodes add the noise), accepted; and three attackers, each rejected by every node — a value
    of 2 where |z_j| ≤ 1 (its second bit decomposition wraps), an honest proof share altered at one node, and a proof
    made for another client id. The release is over the four accepted clients, within its noise."""
    n, t = 8, 4
    job = create_dca(fed, dca_spec(n=n, d=D, deadline=20.0, max_missing=t, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_RANGE,
                                   fractional_bits=F_BITS, sensitivity=2.0))
    ann = _announcement(fed, mint(fed, "party", "quiet"), job)
    params = DcaParams.from_spec(job, ann.spec)
    plan = params.validation
    assert plan is not None
    zeros = np.zeros(D, dtype=np.int64)
    honest_meas = validation.encode_input(plan, zeros)

    ep = Endpoints.load(fed.workdir)
    Z = np.random.default_rng(9).uniform(-0.8, 0.8, (len(HONEST) + 1, D))
    for cid, z in zip(HONEST, Z):
        assert not asyncio.run(submit_vector(ep, mint(fed, "party", f"{cid}-b"), f"{cid}-b", job, z, ledger=client_ledger(fed, f"{cid}-b"))).rejected
    quiet = np.rint(Z[-1] * 2**F_BITS).astype(np.int64)  # a bare ỹ: a valid input of the circuit
    attacks: dict[str, list[dca_pb2.ValidatedShare]] = {"quiet": _shares_of(params, job, "quiet", validation.encode_input(plan, quiet))}

    rng_pred = plan.circuit.predicates[0]
    x = 2 * 2**F_BITS + rng_pred.offset  # y_0 = 2 > clip 1: x_0 fits b bits, x_0 + gap does not (it wraps)
    out_of_range = honest_meas.copy()
    out_of_range[: rng_pred.bits] = _bits(x, rng_pred.bits)
    at = D * rng_pred.bits
    out_of_range[at : at + rng_pred.bits] = _bits((x + rng_pred.gap) % (1 << rng_pred.bits), rng_pred.bits)
    attacks["over-range"] = _shares_of(params, job, "over-range", out_of_range)

    altered = _shares_of(params, job, "altered", honest_meas)
    c = plan.circuit
    proof = F.decode(altered[2].proof, c.proofs * c.proof_len)
    proof[5] = F.add(proof[5], np.uint64(1))
    altered[2].proof = F.encode(proof)
    attacks["altered"] = altered

    attacks["replayer"] = _shares_of(params, job, "replayer", honest_meas, bind_as="somebody-else")

    for cid, shares in attacks.items():
        tls = mint(fed, "party", cid)
        for k, share in enumerate(shares):
            receipt = _stream(fed, tls, NODES[k], [dca_pb2.ClientShare(job_id=job, client_id=cid, validated=share)])
            assert receipt.accepted == 1, (cid, receipt)

    st = wait_dca(fed, job, timeout=120)
    assert st.state == "RELEASED", st
    with operator_curator(fed) as ch:
        r = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca
    assert (r.clients_included, r.clients_rejected) == (len(HONEST) + 1, 3)
    assert not any(cid in str(r) for cid in attacks)
    err = np.array(r.values) - Z.sum(axis=0)
    assert np.all(np.abs(err) <= 6 * math.sqrt(r.noise_variance) + n * 2.0**-F_BITS), (err, r.noise_variance)
    assert_all_serving(fed)


def _send(fed, cid: str, job: str, shares: list[dca_pb2.ValidatedShare], as_id: str | None = None) -> list[dca_pb2.ShareReceipt]:
    tls = mint(fed, "party", as_id or cid)
    return [_stream(fed, tls, NODES[k], [dca_pb2.ClientShare(job_id=job, client_id=as_id or cid, validated=s)]) for k, s in enumerate(shares)]


def _release(fed, job: str) -> dca_pb2.DpSum:
    st = wait_dca(fed, job, timeout=120)
    assert st.state == "RELEASED", st
    with operator_curator(fed) as ch:
        return job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca


def test_one_hot_job_rejects_two_hot_empty_and_replayed_votes_and_refuses_wrong_lengths(fed):
    """A one-hot job, N = 7, T = 4: three honest voters (one through raw shares); a two-hot vote, an empty vote and
    the raw voter's exact shares replayed under a new id are each rejected by every node; the raw voter's exact
    shares sent again under its own id are refused (REPLAY) and it counts once; a measurement one element long and a
    proof one element short are refused (MALFORMED) at every node and the client is missing, not rejected."""
    n, t = 7, 4
    job = create_dca(fed, dca_spec(n=n, d=D, deadline=20.0, max_missing=t, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_ONE_HOT,
                                   fractional_bits=F_BITS, sensitivity=2.0))
    params = DcaParams.from_spec(job, _announcement(fed, mint(fed, "party", "oh-look"), job).spec)
    plan = params.validation
    assert plan is not None
    vote = validation.encode_input(plan, np.array([0, 2**F_BITS, 0]))  # the vote's bits (the circuit is data only)

    ep = Endpoints.load(fed.workdir)
    Z = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    for k, z in enumerate(Z):
        assert not asyncio.run(submit_vector(ep, mint(fed, "party", f"oh-honest-{k}"), f"oh-honest-{k}", job, z, ledger=client_ledger(fed, f"oh-honest-{k}"))).rejected
    raw = _shares_of(params, job, "oh-raw", vote)
    assert [r.accepted for r in _send(fed, "oh-raw", job, raw)] == [1, 1, 1]
    again = _send(fed, "oh-raw", job, raw)  # the exact same shares again: refused, counted once
    assert all(r.accepted == 0 and [x.problem for x in r.rejected] == [common_pb2.REPLAY] for r in again), again

    two_hot, empty = vote.copy(), vote.copy()
    two_hot[0], empty[1] = 1, 0
    attacks = {"oh-two-hot": _shares_of(params, job, "oh-two-hot", two_hot), "oh-empty": _shares_of(params, job, "oh-empty", empty)}
    for cid, shares in attacks.items():
        assert [r.accepted for r in _send(fed, cid, job, shares)] == [1, 1, 1], cid
    assert [r.accepted for r in _send(fed, "oh-raw", job, raw, as_id="oh-copycat")] == [1, 1, 1]  # proof bound to oh-raw

    long_meas, short_proof = _shares_of(params, job, "oh-long", vote), _shares_of(params, job, "oh-short", vote)
    for s in long_meas:
        s.measurement += bytes(8)
    for s in short_proof:
        s.proof = s.proof[:-8]
    for cid, shares in (("oh-long", long_meas), ("oh-short", short_proof)):
        for r in _send(fed, cid, job, shares):
            assert r.accepted == 0 and [x.problem for x in r.rejected] == [common_pb2.MALFORMED], (cid, r)
            assert len(r.rejected[0].detail) < 300 and cid not in r.rejected[0].detail

    r = _release(fed, job)  # 3 honest, 3 rejected (two-hot, empty, copycat); the two wrong-length clients are missing
    assert (r.clients_included, r.clients_rejected) == (3, 3)
    assert not any(cid in str(r) for cid in ("oh-two-hot", "oh-empty", "oh-copycat", "oh-long", "oh-short"))
    err = np.array(r.values) - (Z.sum(axis=0) + np.array([0.0, 1.0, 0.0]))
    assert np.all(np.abs(err) <= 6 * math.sqrt(r.noise_variance) + n * 2.0**-F_BITS), (err, r.noise_variance)
    assert_all_serving(fed)


def test_l2_job_rejects_an_over_norm_vector_and_a_proof_share_altered_at_one_node(fed):
    """An l2 job (‖z‖₂ ≤ 1), N = 5, T = 2: three honest clients; a vector whose every coordinate is in range but whose
    norm is 1.5 (its slack bits claim (bound − ‖y‖²) mod 2^bs, as if the subtraction could wrap) and an honest proof
    share altered at one node are rejected by every node; the release is the honest sum within its noise."""
    n, t = 5, 2
    job = create_dca(fed, dca_spec(n=n, d=D, deadline=20.0, max_missing=t, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_L2,
                                   fractional_bits=F_BITS, sensitivity=2.0))
    params = DcaParams.from_spec(job, _announcement(fed, mint(fed, "party", "l2-look"), job).spec)
    plan = params.validation
    assert plan is not None
    ball = plan.circuit.predicates[0]
    assert isinstance(ball, flp.L2Ball)
    zeros = np.zeros(D, dtype=np.int64)

    ep = Endpoints.load(fed.workdir)
    Z = np.random.default_rng(13).uniform(-0.5, 0.5, (3, D))
    for k, z in enumerate(Z):
        assert not asyncio.run(submit_vector(ep, mint(fed, "party", f"l2-honest-{k}"), f"l2-honest-{k}", job, z, ledger=client_ledger(fed, f"l2-honest-{k}"))).rejected

    y = np.full(D, int(0.87 * 2**F_BITS), dtype=np.int64)  # ‖z‖₂ = 1.5 > 1, every |z_j| < 1
    norm2 = int(np.sum(y.astype(object) ** 2))
    assert norm2 > ball.bound and int(np.max(y)) < 1 << (ball.entry_bits - 1)
    over = validation.encode_input(plan, zeros).astype(np.uint64)
    at = D * ball.entry_bits
    over[:at] = flp._bits_of(y + (1 << (ball.entry_bits - 1)), ball.entry_bits)
    over[at : at + ball.slack_bits] = flp._bits_of(np.array([(ball.bound - norm2) % (1 << ball.slack_bits)]), ball.slack_bits)

    altered = _shares_of(params, job, "l2-altered", validation.encode_input(plan, zeros))
    c = plan.circuit
    proof = F.decode(altered[1].proof, c.proofs * c.proof_len)
    proof[0] = F.add(proof[0], np.uint64(1))
    altered[1].proof = F.encode(proof)
    for cid, shares in (("l2-over", _shares_of(params, job, "l2-over", over)), ("l2-altered", altered)):
        assert [r.accepted for r in _send(fed, cid, job, shares)] == [1, 1, 1], cid

    r = _release(fed, job)
    assert (r.clients_included, r.clients_rejected) == (3, 2)
    err = np.array(r.values) - Z.sum(axis=0)
    assert np.all(np.abs(err) <= 6 * math.sqrt(r.noise_variance) + n * 2.0**-F_BITS), (err, r.noise_variance)
    assert np.max(np.abs(r.values)) < 50
    assert_all_serving(fed)


def test_clients_add_no_noise_and_the_nodes_noise_the_release_all_the_same(fed):
    """N = 4, T = 1: two clients send their bare ỹ through raw stubs (no client of a validated job adds noise: the
    compute nodes do, docs/protocols/dca.md, "Validated mode"). The release is noised all the same — its error is
    not the rounding alone — and states that the nodes added the noise and that dropped or rejected clients remove
    none; its σ_client is 0 and its noise variance is the M nodes' draws."""
    n, t = 4, 1
    job = create_dca(fed, dca_spec(n=n, d=D, deadline=20.0, max_missing=t, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_RANGE,
                                   fractional_bits=F_BITS, sensitivity=2.0))
    params = DcaParams.from_spec(job, _announcement(fed, mint(fed, "party", "q-look"), job).spec)
    plan = params.validation
    assert plan is not None
    ep = Endpoints.load(fed.workdir)
    Z = np.random.default_rng(17).uniform(-0.8, 0.8, (n, D))
    for k, z in enumerate(Z[:2]):
        assert not asyncio.run(submit_vector(ep, mint(fed, "party", f"q-honest-{k}"), f"q-honest-{k}", job, z, ledger=client_ledger(fed, f"q-honest-{k}"))).rejected
    for k, z in enumerate(Z[2:]):
        meas = validation.encode_input(plan, np.rint(z * 2**F_BITS).astype(np.int64))
        assert [r.accepted for r in _send(fed, f"q-quiet-{k}", job, _shares_of(params, job, f"q-quiet-{k}", meas))] == [1, 1, 1]

    r = _release(fed, job)
    assert (r.clients_included, r.clients_rejected) == (n, 0)
    assert "the clients add no noise" in r.guarantee.statement and "dropped or rejected clients remove no noise" in r.guarantee.statement
    assert r.sigma_client == 0 and r.sigma_node > 0 and r.colluders == params.M - 1  # unset: one honest node suffices
    assert math.isclose(r.noise_variance, params.M * r.sigma_node**2, rel_tol=1e-9)
    err = np.array(r.values) - Z.sum(axis=0)
    assert np.all(np.abs(err) <= 6 * math.sqrt(r.noise_variance) + n * 2.0**-F_BITS), (err, r.noise_variance)
    # the nodes' noise is there: P[|N(0, σ²)| ≤ n·2^-f on all d coordinates] < (2n·2^-f/σ)^d, here below 10^-9
    assert np.any(np.abs(err) > n * 2.0**-F_BITS), (err, r.noise_variance)
    assert_all_serving(fed)

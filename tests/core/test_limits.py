"""mpdp.limits: every spec field at its bound is accepted, one past it refused, naming the field and never
echoing a caller's string; duplicates refused; the docs page is the rendering of the table."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mpdp import limits
from mpdp.dca.errors import InvalidJob as DcaInvalidJob
from mpdp.dca.params import DcaParams
from mpdp.hamm2016 import job as hjob
from mpdp.local_release import ReleaseError, validate_spec as validate_local
from mpdp.math.paillier import check_key_bits
from mpdp.messages import common_pb2, contribution_pb2, dca_pb2, hamm2016_pb2, learner_pb2, local_release_pb2, pathak2010_pb2
from mpdp.pathak2010.params import InvalidJob, PathakParams
from mpdp.regression.plan import RegressionPlan

REPO = Path(__file__).resolve().parents[2]


def valid(spec: str):
    """A message (or announcement) that passes every row of ``spec``."""
    P = ["p1", "p2", "p3"]
    N = ["n1", "n2"]
    return {
        "PathakJobSpec": lambda: pathak2010_pb2.PathakJobSpec(dataset="adult", epsilon=1.0, mode=common_pb2.CORRECTED, parties=P, **{"lambda": 0.01}),
        "JobAnnouncement": lambda: pathak2010_pb2.JobAnnouncement(job_id="pk-0123456789ab", spec=valid("PathakJobSpec"), party_addresses={p: "127.0.0.1:1" for p in P}),
        "JobAcceptance": lambda: pathak2010_pb2.JobAcceptance(job_id="pk-1", dimension=10),
        "DcaJobSpec": lambda: dca_pb2.DcaJobSpec(dimension=4, clients=10, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=1.0, mode=common_pb2.CORRECTED, compute_nodes=N),
        "DcaJobAnnouncement": lambda: dca_pb2.DcaJobAnnouncement(job_id="dca-0123456789ab", spec=valid("DcaJobSpec"), node_addresses={n: "127.0.0.1:1" for n in N}),
        "StatisticRequest": lambda: contribution_pb2.StatisticRequest(dca_job_id="dca-1", dataset="wine", statistic="linreg/std", bounds=[1.0, 1.0], records_per_client=100),
        "ContributionRound": lambda: contribution_pb2.ContributionRound(request=valid("StatisticRequest"), parties=P),
        "EnsembleJobSpec": lambda: hamm2016_pb2.EnsembleJobSpec(dataset="bc", auxiliary="bc_aux", method="soft", lam=0.01, epsilon=1.0, classes=["0", "1"], parties=P, compute_nodes=N),
        "VoteRequest": lambda: hamm2016_pb2.VoteRequest(job_id="hm-1", dca_job_id="pending", spec=valid("EnsembleJobSpec"), auxiliary_digest=b"\x00" * 32, auxiliary_rows=10, auxiliary_features=3),
        "LocalModelJobSpec": lambda: local_release_pb2.LocalModelJobSpec(dataset="adult", model="lmgc", epsilon=1.0, parties=P, mode=common_pb2.CORRECTED),
        "LocalModelRequest": lambda: local_release_pb2.LocalModelRequest(job_id="lm-1", spec=valid("LocalModelJobSpec")),
        "DpgdJobSpec": lambda: learner_pb2.DpgdJobSpec(task="binary", classes=2, dimension=4, epsilon=1.0, delta=1e-6, lam=1e-3, rounds=2, total_records=100,
                                                       mode=common_pb2.CORRECTED),
        "RegressionJobSpec": lambda: learner_pb2.RegressionJobSpec(bounds=[1.0, 1.0], epsilon=1.0, delta=1e-4, total_records=100, mode=common_pb2.CORRECTED),
        "LearnerJobSpec": lambda: learner_pb2.LearnerJobSpec(dataset="adult", parties=P, compute_nodes=N, records_per_party=100, dpgd=valid("DpgdJobSpec")),
    }[spec]()


CHECKS = {
    "PathakJobSpec": limits.check_pathak_job_spec,
    "JobAnnouncement": limits.check_job_announcement,
    "JobAcceptance": limits.check_job_acceptance,
    "DcaJobSpec": limits.check_dca_job_spec,
    "DcaJobAnnouncement": limits.check_dca_job_announcement,
    "StatisticRequest": limits.check_statistic_request,
    "ContributionRound": limits.check_contribution_round,
    "EnsembleJobSpec": limits.check_ensemble_job_spec,
    "VoteRequest": limits.check_vote_request,
    "LocalModelJobSpec": limits.check_local_model_job_spec,
    "LocalModelRequest": limits.check_local_model_request,
    "DpgdJobSpec": lambda m: limits.check_message("DpgdJobSpec", m),  # LearnerJobSpec.dpgd
    "RegressionJobSpec": lambda m: limits.check_message("RegressionJobSpec", m),  # LearnerJobSpec.regression
    "LearnerJobSpec": limits.check_learner_job_spec,
}
MESSAGE_ROWS = [(spec, row) for spec in CHECKS for row in limits.TABLE[spec]]


def _set(msg, field: str, value) -> None:
    cur = getattr(msg, field)
    if hasattr(cur, "keys"):  # a map
        cur.clear()
        for k in value:
            cur[k] = "127.0.0.1:1"
    elif hasattr(cur, "extend"):
        del cur[:]
        cur.extend(value)
    else:
        setattr(msg, field, value)


def _edges(row: limits.Limit) -> tuple[list, list]:
    """(values at the bounds, values one past them) for a row."""
    if row.kind == "int":
        good = [row.min, row.max]
        bad = [row.max + 1] + [b for b in [row.min - 1] if b >= 0 and not (b == 0 and row.default is not None)]
        return good, bad
    if row.kind == "real":
        good = [row.max if not row.open_max else math.nextafter(row.max, -math.inf), math.nextafter(row.min, math.inf) if row.open_min else row.min]
        bad = [math.nextafter(row.max, math.inf) if not row.open_max else row.max, math.inf, math.nan]
        if row.default is None and (row.open_min or row.min > 0):
            bad.append(row.min if row.open_min else math.nextafter(row.min, -math.inf))
        if row.min == 0 and row.default is None and not row.open_min:
            bad.append(-1e-300)
        return good, bad
    if row.kind == "id":
        return ["a", "A" * 64, "pk-0123456789ab", "site_1.x-y"], ["", "a" * 65, "x" * 20_000, "-a", "a/b", "../etc", "a b", "é"]
    if row.kind == "sha256":
        return ["", "0" * 64, "0123456789abcdef" * 4], ["0" * 63, "0" * 65, "A" * 64, "g" * 64, "x" * 20_000, " " + "0" * 63]
    if row.kind == "text":
        return ["a" * max(row.min, 1), "a" * row.max], ["a" * (row.max + 1)] + ([""] if row.min > 0 else [])
    if row.kind == "bytes":
        return [b"\x01" * row.min, b"\x01" * row.max], [b"\x01" * (row.max + 1)] + ([b"\x01" * (row.min - 1)] if row.min > 0 else [])
    if row.kind == "choice":
        return list(row.choices), (["nope", ""] if isinstance(row.choices[0], str) else [b for b in (0, 99) if b not in row.choices])  # 0 may be a default
    assert row.kind == "count"
    item = {"id": lambda i: f"s{i}", "text": lambda i: f"c{i}", "client": lambda i: f"c{i}", "real+": lambda i: 1.0}[row.item]
    good = [[item(i) for i in range(n)] for n in (row.min, min(row.max, 2000))]
    bad = [[item(i) for i in range(row.max + 1)]] + ([[item(i) for i in range(row.min - 1)]] if row.min > 0 else [])
    if row.item in ("id", "text", "client") and not row.field.endswith("_addresses"):  # a map cannot repeat a key
        bad.append([item(0), item(0)] + [item(i) for i in range(1, max(row.min, 2) - 1)])  # a duplicate
    if row.item == "id":
        bad.append([item(i) for i in range(max(row.min, 1) - 1)] + ["a/b"])
    if row.item == "real+":
        bad += [[0.0] * max(row.min, 1), [math.inf] * max(row.min, 1)]
    return good, bad


def _cases():
    for spec, row in MESSAGE_ROWS:
        good, bad = _edges(row)
        for v in good:
            yield pytest.param(spec, row.field, v, True, id=f"{spec}.{row.field}-ok-{_short(v)}")
        for v in bad:
            yield pytest.param(spec, row.field, v, False, id=f"{spec}.{row.field}-bad-{_short(v)}")


def _short(v) -> str:
    if isinstance(v, (list, bytes, str)) and len(v) > 8:
        return f"{type(v).__name__}{len(v)}"
    return repr(v)


@pytest.mark.parametrize("spec, field, value, ok", list(_cases()))
def test_every_field_at_and_past_its_bound(spec, field, value, ok):
    msg = valid(spec)
    CHECKS[spec](msg)  # the base message is valid
    if not ok and isinstance(value, int) and value > 2**32 - 1 and msg.DESCRIPTOR.fields_by_name[field].cpp_type == msg.DESCRIPTOR.fields_by_name[field].CPPTYPE_UINT32:
        with pytest.raises(ValueError, match="out of range"):  # past a uint32 field's bound: the wire cannot carry it
            _set(msg, field, value)
        return
    _set(msg, field, value)
    if ok:
        CHECKS[spec](msg)
        return
    with pytest.raises(limits.SpecError) as e:
        CHECKS[spec](msg)
    assert e.value.field == field and isinstance(e.value, ValueError)
    text = str(e.value)
    assert len(text) < 300
    for s in (value if isinstance(value, list) else [value]):
        if isinstance(s, str) and len(s) > 1:
            assert s not in text  # never echoes a caller's string


def test_nested_spec_fields_are_named_with_their_path():
    ann = valid("JobAnnouncement")
    ann.spec.kappa = 1_000_000
    with pytest.raises(limits.SpecError) as e:
        limits.check_job_announcement(ann)
    assert e.value.field == "spec.kappa" and "[40, 128]" in str(e.value)


@pytest.mark.parametrize("value", ["", "a" * 65, "x" * 20_000, "bad id", "a/../../etc/passwd", "\x00", "ü" * 10, "-lead", "\n"])
def test_bad_ids_refused_without_echo(value):
    with pytest.raises(limits.SpecError) as e:
        limits.check_id(value, "job_id")
    assert e.value.field == "job_id" and (value not in str(e.value) or value == "") and len(str(e.value)) < 200


@pytest.mark.parametrize("value", ["pk-0123456789ab", "dca-0123456789ab", "hm-0123456789ab", "lm-0123456789ab", "pending", "blr.std", "red-r3-corrected-e31.62-proj.main", "A" * 64])
def test_generated_ids_are_ids(value):
    limits.check_id(value, "job_id")


def test_duplicates_refused():
    limits.check_unique(["p1", "p2", "p3"], "parties")
    with pytest.raises(limits.SpecError, match="parties: names must be distinct") as e:
        limits.check_unique(["p1", "p1", "p2", "p3"], "parties")
    assert "p1" not in str(e.value)
    rnd = contribution_pb2.ContributionRound(request=valid("StatisticRequest"), parties=["p1", "p1", "p2", "p3"])
    with pytest.raises(limits.SpecError, match="parties"):
        limits.check_contribution_round(rnd)


def test_protocol_validators_refuse_through_their_own_error_types():
    """The servicers' existing ``except InvalidJob`` / EnsembleJobError / ReleaseError still catch every refusal."""
    spec = valid("PathakJobSpec")
    spec.kappa = 1_000_000
    with pytest.raises(InvalidJob, match=r"kappa: .*\[40, 128\]"):
        PathakParams.from_spec("pk-1", spec)
    spec.kappa = 128
    PathakParams.from_spec("pk-1", spec)
    with pytest.raises(InvalidJob, match="job_id"):
        PathakParams.from_spec("x" * 300, valid("PathakJobSpec"))
    dup = valid("PathakJobSpec")
    dup.parties[:] = ["p1", "p1", "p2"]
    with pytest.raises(InvalidJob, match="distinct"):
        PathakParams.from_spec("pk-1", dup)
    with pytest.raises(DcaInvalidJob, match="job_id") as e:
        DcaParams.from_spec("z" * 20_000, valid("DcaJobSpec"))
    assert "zzz" not in e.value.detail
    big = valid("DcaJobSpec")
    big.compute_nodes[:] = ["n1", "n1"]
    with pytest.raises(DcaInvalidJob, match="compute_nodes"):
        DcaParams.from_spec("dca-1", big)
    ens = valid("EnsembleJobSpec")
    ens.parties[:] = ["p1", "p1", "p2"]
    with pytest.raises(hjob.EnsembleJobError, match="parties"):
        hjob.validate_spec(ens)
    loc = valid("LocalModelJobSpec")
    loc.dataset = "../" + "d" * 100
    with pytest.raises(ReleaseError, match="dataset") as e:
        validate_local(loc)
    assert "ddd" not in str(e.value)


def test_dca_params_ranges_apply_to_resolved_values():
    """A DcaParams built directly (not from a spec) cannot use 0 as 'default': 0 f bits or 0 s deadline is refused."""
    base = dict(job_id="dca-1", dimension=4, clients=10, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=1.0, nodes=("n1", "n2"))
    DcaParams(**base, deadline_seconds=limits.MAX_DEADLINE)
    for bad in ({"frac_bits": 0}, {"deadline_seconds": 0.0}, {"deadline_seconds": limits.MAX_DEADLINE * 2}, {"dimension": limits.MAX_DCA_DIMENSION + 1}):
        with pytest.raises(DcaInvalidJob):
            DcaParams(**{**base, **bad})


def test_regression_plan_bounds():
    RegressionPlan((1.0,) * (limits.MAX_REGRESSION_D + 1), 1.0, 1e-4)
    for bounds, eps, delta in [((1.0,) * (limits.MAX_REGRESSION_D + 2), 1.0, 1e-4), ((1.0,), 1.0, 1e-4), ((1.0, 1.0), 0.0, 1e-4),
                               ((1.0, 1.0), limits.MAX_EPSILON * 2, 1e-4), ((1.0, 1.0), 1.0, 1.0), ((1.0, 1.0), 1.0, 0.0), ((1.0, -1.0), 1.0, 1e-4)]:
        with pytest.raises(ValueError):
            RegressionPlan(bounds, eps, delta)


def test_key_bits():
    for bits, test_mode in [(2048, False), (8192, False), (256, True), (8192, True)]:
        check_key_bits(bits, test_mode=test_mode)
    for bits, test_mode in [(2047, False), (1024, False), (8193, False), (255, True), (8193, True), (10**6, True)]:
        with pytest.raises(ValueError, match="key bits"):
            check_key_bits(bits, test_mode=test_mode)


def test_every_spec_message_has_its_rows():
    """Each spec message in proto/ has a table; each row names a real field of it."""
    for spec, check in CHECKS.items():
        msg = valid(spec)
        fields = {f.name for f in msg.DESCRIPTOR.fields}
        assert {r.field for r in limits.TABLE[spec]} <= fields, spec
    for name in ("PathakJobSpec", "DcaJobSpec", "EnsembleJobSpec", "LocalModelJobSpec", "StatisticRequest", "ContributionRound"):
        assert name in limits.TABLE


def test_docs_page_is_the_rendered_table():
    committed = (REPO / "docs" / "protocols" / "limits.md").read_text()
    assert committed == limits.markdown(), "run `python -m mpdp.limits > docs/protocols/limits.md`"
    for spec, rows in limits.TABLE.items():
        for r in rows:
            assert f"| `{r.field}` | {r.allowed()} |" in committed


def test_a_learner_job_names_its_learner():
    spec = valid("LearnerJobSpec")
    spec.ClearField("dpgd")
    with pytest.raises(limits.SpecError) as e:
        limits.check_learner_job_spec(spec)
    assert e.value.field == "learner"
    spec = valid("LearnerJobSpec")
    spec.dpgd.dimension = 0
    with pytest.raises(limits.SpecError) as e:
        limits.check_learner_job_spec(spec)
    assert e.value.field == "dpgd.dimension"
    spec = valid("LearnerJobSpec")
    spec.job_id = "a/b"
    with pytest.raises(limits.SpecError) as e:
        limits.check_learner_job_spec(spec)
    assert e.value.field == "job_id" and "a/b" not in str(e.value)

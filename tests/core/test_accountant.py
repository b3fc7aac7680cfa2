"""The ledger's accountant (mpdp.accounting, docs/protocols/accounting.md): tight composition, never above basic.

Invariants: k Gaussian entries compose to the closed-form Gaussian with μ = √k/z; k pure-ε entries compose to at
least Kairouz et al.'s exact k-fold value and at most basic; the composed ε is never above basic composition's;
the ledger's refusal rule uses the composed ε at the budget δ; entries without a (known) record are accounted by
their own (ε, δ); a malformed record is a LedgerError, never free budget; every ledger entry builder's record
gives back (at most) the guarantee the entry states.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from mpdp import accounting
from mpdp.dca.params import DcaParams
from mpdp.dp.mechanisms import analytic_gaussian_sigma
from mpdp.dpgd.accounting import gdp_epsilon
from mpdp.ledger import BudgetExceeded, Ledger, LedgerError, PrivacyLedger, composition, release_of


def dca_entry(job: str, eps: float = 1.0, delta: float = 1e-7, **kw) -> dict:
    e = DcaParams(job_id=job, dimension=3, clients=5, max_missing=1, epsilon=eps, delta=delta, sensitivity=1.0, nodes=("a", "b"), **kw).ledger_entry()
    return e


def pure(job: str, eps: float) -> dict:
    return {"protocol": "t", "job_id": job, "epsilon": eps, "delta": 0.0, "accounting": accounting.pure_epsilon("spherical Laplace")}


def kfold_pure_epsilon(eps: float, k: int, delta: float) -> float:
    """Exact ε of k-fold composition of ε-DP at δ (Kairouz, Oh & Viswanath 2015: k-fold ε-randomised response)."""
    from math import comb

    p, q = math.exp(eps) / (1 + math.exp(eps)), 1 / (1 + math.exp(eps))

    def dlt(e: float) -> float:
        return sum(comb(k, l) * max(0.0, p ** (k - l) * q**l - math.exp(e) * q ** (k - l) * p**l) for l in range(k + 1))

    lo, hi = 0.0, k * eps
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dlt(mid) > delta else (lo, mid)
    return hi


# -- composition against closed forms ------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 4, 25, 100])
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_k_gaussians_compose_to_one_gaussian_with_sigma_over_sqrt_k(k):
    z = analytic_gaussian_sigma(1.0, 1.0, 1e-6)  # each entry: (1, 1e-6)-DP, σ/Δ = z
    entries = [dca_entry(f"j{i}", 1.0, 1e-6) for i in range(k)]
    assert release_of(entries[0]).noise_multiplier == pytest.approx(z, rel=1e-12)
    closed = gdp_epsilon(math.sqrt(k) / z, 1e-5)  # one Gaussian with σ/Δ = z/√k (Balle & Wang's exact curve)
    c = composition(entries, 1e-5)
    assert c.epsilon == pytest.approx(closed, rel=1e-9) and c.method == "pld"
    # through the PLD (a pure entry of ε = 10⁻³ forces the numerical route): an upper bound, within the grid
    mixed = composition([*entries, pure("tiny", 1e-3)], 1e-5)
    assert closed <= mixed.pld_epsilon <= closed + 1e-3 + 0.01 * closed
    # and dp_accounting's own accountant on k Gaussian events agrees
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_event.GaussianDpEvent(z), k)
    assert acc.get_epsilon(1e-5) == pytest.approx(closed, rel=1e-3)


@pytest.mark.parametrize("eps,k", [(0.1, 50), (0.5, 20), (1.0, 10), (2.0, 5)])
def test_pure_epsilon_entries_compose_to_the_exact_kfold_value(eps, k):
    c = composition([pure(f"p{i}", eps) for i in range(k)], 1e-5)
    exact = kfold_pure_epsilon(eps, k, 1e-5)
    assert exact - 1e-9 <= c.pld_epsilon <= exact + 1e-3 * k  # pessimistic grid: never below the truth
    assert c.epsilon == min(c.pld_epsilon, k * eps) <= k * eps


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_never_above_basic_composition():
    rng = np.random.default_rng(7)  # public test data
    for trial in range(30):
        entries = []
        for i in range(int(rng.integers(1, 25))):
            kind = int(rng.integers(3))
            eps = float(rng.choice([0.1, 0.5, 1.0, 2.0]))
            if kind == 0:
                entries.append(dca_entry(f"g{i}", eps, 1e-8))
            elif kind == 1:
                entries.append(pure(f"p{i}", eps))
            else:
                entries.append({"protocol": "t", "job_id": f"e{i}", "epsilon": eps, "delta": 1e-8})
        c = composition(entries, 1e-5)
        basic = sum(e["epsilon"] for e in entries)
        assert c.epsilon <= basic and c.basic_epsilon == pytest.approx(basic)


def test_entries_known_only_by_eps_delta_keep_their_delta():
    """(ε, δ) pairs: their δ is spent (the +∞ loss mass), so two (1, 6e-6) entries cannot fit δ = 1e-5."""
    one = {"protocol": "t", "job_id": "a", "epsilon": 1.0, "delta": 6e-6}
    assert composition([one], 1e-5).epsilon <= 1.0
    two = composition([one, {**one, "job_id": "b"}], 1e-5)
    assert two.epsilon == math.inf and two.pld_epsilon == math.inf and two.basic_epsilon == math.inf


def test_tv_is_charged_at_the_composed_epsilon():
    z = analytic_gaussian_sigma(1.0, 1.0, 1e-6)
    clean = [{"protocol": "t", "job_id": f"j{i}", "epsilon": 1.0, "delta": 1e-6, "accounting": accounting.gaussian(z)} for i in range(9)]
    close = [{**e, "accounting": accounting.gaussian(z, tv=1e-10)} for e in clean]
    far = [{**e, "accounting": accounting.gaussian(z, tv=1e-7)} for e in clean]
    a, b, c = (composition(x, 1e-5, 10.0) for x in (clean, close, far))
    assert a.epsilon < b.epsilon < a.epsilon + 0.05  # (1 + e^ε)·9e-10 of δ: a little more ε
    assert c.pld_epsilon > b.epsilon  # 9e-7·(1 + e^ε) eats most of δ = 1e-5
    assert c.epsilon <= 9.0  # and never above basic


def test_discrete_gaussian_entries_compose_in_rdp():
    entries = [dca_entry(f"d{i}", 1.0, 1e-7, noise="discrete-gaussian", frac_bits=16) for i in range(20)]
    r = release_of(entries[0])
    assert r.kind == "discrete-gaussian" and r.rho == entries[0]["rho"] and r.tv > 0
    c = composition(entries, 1e-5)
    assert c.method == "rdp" and c.rdp_epsilon < c.pld_epsilon and c.epsilon < 20.0 * 0.5


# -- the refusal rule ---------------------------------------------------------------------------------
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_refusal_uses_the_composed_epsilon(tmp_path):
    """Budget (10, 1e-5), DCA jobs of (1, 1e-7): basic composition stops after 10; the accountant admits more,
    then refuses exactly when the composed ε would exceed 10."""
    led = Ledger(tmp_path / "ledger.json", 10.0, 1e-5)
    n = 0
    while True:
        e = dca_entry(f"dca-{n}")
        try:
            led.spend(e)
        except BudgetExceeded as exc:
            refused = exc
            break
        n += 1
        assert n < 500
    assert n > 10  # basic composition refuses job 10 (Σε = 11 > 10) ...
    spent = led.composition()
    assert spent.epsilon <= 10.0 and refused.composed_epsilon > 10.0  # ... and the accountant refuses job n
    assert composition([*led.entries, e], 1e-5).epsilon == pytest.approx(refused.composed_epsilon)
    assert refused.left_epsilon == pytest.approx(10.0 - spent.epsilon)
    assert "with it the ledger composes to" in str(refused)


def test_a_job_basic_would_refuse_is_admitted_and_one_the_accountant_refuses_is_not(tmp_path):
    led = Ledger(tmp_path / "ledger.json", 3.0, 1e-5)
    for i in range(3):
        led.spend(dca_entry(f"a{i}", 1.0, 1e-6))
    led.spend(dca_entry("a3", 1.0, 1e-6))  # Σε = 4 > 3: basic would refuse; composed ≈ 2.2
    assert led.composition().epsilon < 3.0 < sum(e["epsilon"] for e in led.entries)
    with pytest.raises(BudgetExceeded):
        led.spend(pure("big", 2.0))  # a pure ε = 2 on top composes above 3
    assert len(led.entries) == 4


def test_precheck_and_spend_agree_for_a_mechanism_record():
    led = PrivacyLedger(2.2, 1e-5, [dca_entry(f"a{i}", 1.0, 1e-6) for i in range(3)])  # 4 Gaussians: 1.88; 3 + an (ε, δ) pair: 2.58
    e = dca_entry("a3", 1.0, 1e-6)
    led.check(e["epsilon"], e["delta"], e["accounting"])  # fits as a Gaussian ...
    with pytest.raises(BudgetExceeded):
        led.check(e["epsilon"], e["delta"])  # ... not when only its (ε, δ) is known


# -- records that are missing, unknown or malformed ----------------------------------------------------
def test_entries_without_or_with_an_unknown_record_fall_back_to_their_own_eps_delta():
    base = {"protocol": "t", "job_id": "x", "epsilon": 0.7, "delta": 1e-7}
    for e in (base, {**base, "accounting": {"kind": "some-future-mechanism", "whatever": 1}}):
        r = release_of(e)
        assert (r.kind, r.pure, r.delta) == ("eps-delta", 0.7, 1e-7)
    many = [{**base, "job_id": f"x{i}"} for i in range(20)]
    c = composition(many, 1e-5)
    assert kfold_pure_epsilon(0.7, 20, 1e-5) <= c.epsilon <= 14.0  # the pairs' δ is spent, never ignored
    assert release_of({"protocol": "t", "job_id": "m", "epsilon": 0.0, "delta": 0.0}).kind == "none"


@pytest.mark.parametrize(
    "record",
    [
        "gaussian",
        {"noise_multiplier": 2.0},
        {"kind": "gaussian"},
        {"kind": "gaussian", "noise_multiplier": "2.0"},
        {"kind": "gaussian", "noise_multiplier": -1.0},
        {"kind": "gaussian", "noise_multiplier": 0.0},
        {"kind": "gaussian", "noise_multiplier": float("nan")},
        {"kind": "gaussian", "noise_multiplier": 1e300},
        {"kind": "gaussian", "noise_multiplier": True},
        {"kind": "gaussian", "noise_multiplier": 2.0, "noise_multipliers": [2.0]},
        {"kind": "gaussian", "noise_multipliers": []},
        {"kind": "gaussian", "noise_multipliers": [2.0, 0.0]},
        {"kind": "gaussian", "noise_multipliers": "2.0"},
        {"kind": "gaussian", "noise_multiplier": 2.0, "tv": 2.0},
        {"kind": "gaussian", "noise_multiplier": 2.0, "tv": -1e-9},
        {"kind": "discrete-gaussian", "rho": 0.0, "tv": 0.0},
        {"kind": "discrete-gaussian", "rho": None, "tv": 0.0},
        {"kind": "pure-epsilon", "noise": "x"},  # with δ > 0 below: not pure
        {"kind": "none"},  # charging ε > 0 while releasing nothing
    ],
)
def test_a_malformed_record_is_a_ledger_error_never_free_budget(tmp_path, record):
    e = {"protocol": "t", "job_id": "bad", "epsilon": 1.0, "delta": 1e-7, "accounting": record}
    with pytest.raises(LedgerError):
        release_of(e)
    led = Ledger(tmp_path / "ledger.json", 10.0, 1e-5)
    with pytest.raises(LedgerError):
        led.spend(e)
    assert not (tmp_path / "ledger.json").exists()
    path = tmp_path / "tampered.json"
    text = json.dumps({"entries": [e]})
    path.write_text(text)
    with pytest.raises(LedgerError):
        Ledger(path, 10.0).spend(pure("ok", 0.1))
    assert path.read_text() == text


def test_a_retry_with_another_mechanism_is_refused(tmp_path):
    led = Ledger(tmp_path / "ledger.json", 10.0, 1e-5)
    e = dca_entry("j")
    led.spend(e)
    assert led.spend(dict(e))["job_id"] == "j"
    with pytest.raises(LedgerError, match="already charged"):
        led.spend({**e, "accounting": accounting.gaussian(100.0)})
    assert led.mark("dca", "j", "released", {"accounting": accounting.gaussian(100.0)})["accounting"] == e["accounting"]


# -- every builder's record gives back the guarantee its entry states ------------------------------------
def _builders() -> list[tuple[str, dict, bool]]:
    """(name, entry, tight): tight = the record reproduces the entry's ε (else it may only be below it)."""
    from mpdp.dp.pathak_noise import PathakCalibration
    from mpdp.dpgd.model import BINARY, Task
    from mpdp.dpgd.plan import DpgdPlan
    from mpdp.hamm2016.job import ledger_entry as hamm_entry
    from mpdp.local_release import ledger_entry as local_entry
    from mpdp.messages import common_pb2, hamm2016_pb2, local_release_pb2
    from mpdp.regression import ledger_entry as regression_entry
    from mpdp.regression import main_round_spec, std_round_spec
    from mpdp.pathak2010.party import charge_of as pathak_entry

    out = []
    for mode in ("corrected", "paper"):
        for eps in (0.5, 2.0):
            out.append((f"dca {mode} ε={eps}", dca_entry("d", eps, 1e-5, mode=mode), mode == "corrected"))
    out.append(("dca discrete", dca_entry("d", 1.0, 1e-5, noise="discrete-gaussian", frac_bits=16), True))
    for r in (0, 4):
        out.append((f"dpgd R={r}", DpgdPlan(Task(BINARY), 10, 1.0, 1e-6, rounds=r, total_records=500).ledger_entry("g"), True))
    for mode, delta, t in (("gaussian-distributed", 1e-6, 2), ("corrected", 0.0, 0), ("paper", 0.0, 0)):
        cal = PathakCalibration(mode, 1.0, 0.05, 4, delta, t)
        out.append((f"pathak {mode}", pathak_entry(SimpleNamespace(job_id="p", d=123, params=SimpleNamespace(calibration=cal, dataset="a9a"))), True))
    for mode in ("corrected", "paper"):
        out.append((f"regression std {mode}", regression_entry(std_round_spec([7.5] * 12, 0.3, 3e-5, mode), "s", seeded=False), mode == "corrected"))
        out.append((f"regression main {mode}", regression_entry(main_round_spec([1.0] * 12, 0.7, 7e-5, mode), "m", seeded=False), mode == "corrected"))
    for mode in (common_pb2.CORRECTED, common_pb2.PAPER):
        spec = local_release_pb2.LocalModelJobSpec(dataset="adult", model="lmgc", epsilon=1.0, parties=["a", "b"], mode=mode)
        out.append((f"local {mode}", local_entry(local_release_pb2.LocalModelRequest(job_id="lm-1", spec=spec)), True))
    spec = hamm2016_pb2.EnsembleJobSpec(dataset="d", auxiliary="aux", parties=["a", "b", "c"], classes=["0", "1"], method="soft", epsilon=1.0, lam=0.01,
                                        compute_nodes=["n1", "n2"])
    out.append(("hamm2016", hamm_entry("h", spec, "h/votes", 100), True))
    return out


def test_every_builder_records_a_mechanism_that_gives_back_its_guarantee():
    for name, e, tight in _builders():
        assert "accounting" in e, name
        r = release_of(e)
        assert r.kind != "eps-delta" or "local" in name, name  # only LMGC paper mode is known by (ε, δ) alone
        delta = e["delta"] if e["delta"] > 0 else 1e-9
        c = accounting.compose([r], delta)
        assert c.epsilon <= e["epsilon"] * (1 + 1e-9), name  # never more than the entry states ...
        if tight:
            assert c.epsilon >= e["epsilon"] * 0.999, name  # ... and, where the calibration is tight, the same


def test_secure_sums_and_markers_release_nothing():
    e = DcaParams(job_id="v", dimension=4, clients=3, max_missing=0, epsilon=0.0, delta=0.0, sensitivity=0.0, nodes=("a", "b"), secure_sum=True).ledger_entry()
    assert release_of(e).kind == "none"
    assert composition([e, e], 1e-5).epsilon == 0.0


def test_huge_epsilons_leave_basic_composition_to_decide():
    """An entry of ε = 1000 (a test federation's) overflows the PLD's e^ε; the accountants step aside, no error."""
    entries = [{"protocol": "t", "job_id": "a", "epsilon": 1000.0, "delta": 0.0}, pure("b", 1.0),
               {"protocol": "t", "job_id": "c", "epsilon": 5e3, "delta": 1e-6, "accounting": accounting.gaussian(1e-5)}]
    c = composition(entries, 1e-3)
    assert (c.epsilon, c.method, c.pld_epsilon) == (6001.0, "basic", math.inf)
    PrivacyLedger(1e6, 1e-3, entries).check(1.0)

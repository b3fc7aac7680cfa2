"""Budget split, real guarantees and ledger entries of Algorithm 2 (basic composition of the two rounds)."""

from __future__ import annotations

import math

import pytest

from mpdp.dp.mechanisms import analytic_gaussian_sigma, gaussian_delta as bw_delta
from mpdp.ledger import BudgetExceeded, PrivacyLedger
from mpdp.regression import budget_split, epsilon_for, ledger_entry, main_round_spec, round_guarantee, std_round_spec
from mpdp.regression.config import MAIN_SHARE, STD_SHARE
from mpdp.regression.privacy import gaussian_delta


@pytest.mark.parametrize("eps", [0.1, 1.0, 1.7782794100389228, 10.0, 31.622776601683793])
@pytest.mark.parametrize("delta", [1e-4, 1e-3])
def test_budget_split_sums_to_total(eps, delta):
    b = budget_split(eps, delta)
    assert (STD_SHARE, MAIN_SHARE) == (0.3, 0.7)
    assert b.std == (0.3 * eps, 0.3 * delta)
    assert b.std[0] + b.main[0] == pytest.approx(eps, rel=1e-15)
    assert b.std[1] + b.main[1] == pytest.approx(delta, rel=1e-15)
    assert b.main[0] == pytest.approx(0.7 * eps, rel=1e-14) and b.main[1] == pytest.approx(0.7 * delta, rel=1e-14)


def test_stable_delta_matches_balle_wang_and_epsilon_for_inverts_it():
    for sigma, sens, eps in [(3.0, 1.0, 0.5), (1.0, 2.0, 2.0), (10.0, 7.0, 0.1)]:
        assert gaussian_delta(sigma, sens, eps) == pytest.approx(bw_delta(sigma, sens, eps), rel=1e-9, abs=1e-15)
    s = analytic_gaussian_sigma(3.0, 0.7, 1e-5)
    assert epsilon_for(s, 3.0, 1e-5) == pytest.approx(0.7, rel=1e-6)
    assert gaussian_delta(1.0, 1.0, 2000.0) == 0.0  # no overflow at huge ε
    assert epsilon_for(1e-6, 1.0, 1e-5) == math.inf


def test_corrected_rounds_give_what_they_announce():
    c = [7.5] * 12
    for spec in (std_round_spec(c, 0.3, 3e-5, "corrected"), main_round_spec([1.0] * 12, 0.7, 7e-5, "corrected")):
        g = round_guarantee(spec)
        assert g.epsilon_actual == pytest.approx(spec.epsilon, rel=1e-6) and g.epsilon_actual <= spec.epsilon * (1 + 1e-9)


def test_paper_std_round_is_much_weaker_than_announced():
    """The authors' std-round slip: the declared Δ₂ = sqrt(Σc²) is 7.5× too small for UCI; the real ε is several times the nominal."""
    spec = std_round_spec([7.5] * 12, 0.3, 3e-5, "paper")
    g = round_guarantee(spec)
    assert g.true_sensitivity == pytest.approx(7.5 * g.declared_sensitivity)
    assert g.epsilon_actual > 5 * 0.3
    e = ledger_entry(spec, "job-std", seeded=True)
    assert e["epsilon"] == g.epsilon_actual > e["epsilon_nominal"] == 0.3
    assert "not" in g.statement


def test_ledger_entries_compose_to_the_budget():
    """One entry per round; the split adds up to the budget by basic composition, and the ledger's
    accountant (the rounds are Gaussians) states less: 1.50 of ε = 2 at δ = 10⁻⁴. A second whole fit is refused."""
    eps, delta = 2.0, 1e-4
    b = budget_split(eps, delta)
    c = [7.5] * 6
    entries = [ledger_entry(std_round_spec(c, *b.std, "corrected"), "fit-1/std", seeded=False),
               ledger_entry(main_round_spec([2.0] * 6, *b.main, "corrected"), "fit-1/main", seeded=False)]
    led = PrivacyLedger(budget_epsilon=eps, budget_delta=delta)
    for e in entries:
        led.check_entry(e)
        led.record(e)
    assert len(led.entries) == 2
    assert led.composition().basic_epsilon == pytest.approx(eps) and led.spent_delta == pytest.approx(delta)
    assert 1.45 < led.spent_epsilon < 1.55
    second = [{**e, "job_id": e["job_id"].replace("fit-1", "fit-2")} for e in entries]
    led.check_entry(second[0])  # the accountant has room for one more std round ...
    led.record(second[0])
    with pytest.raises(BudgetExceeded):
        led.check_entry(second[1])  # ... not for the whole second fit (ε = 2.24)
    assert {e["round"] for e in entries} == {"std", "main"} and all(e["composition"].startswith("basic") for e in entries)

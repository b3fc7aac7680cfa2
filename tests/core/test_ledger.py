"""The durable privacy ledger (mpdp.ledger.Ledger): one spend operation, atomic across threads and processes.

Invariants: the composed ε at the budget δ (tests/core/test_accountant.py) never exceeds the budget ε, however
many threads or processes spend at once; a
refused spend writes nothing; a job id is charged once; a failed job keeps its charge; the charge of a
Pathak job is its true guarantee (paper mode √d·ε/(2K)), not the nominal ε; files are 0600 and every
write is fsync'd (file, then folder).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from mpdp.dp.pathak_noise import PathakCalibration
from mpdp.ledger import FAILED, RELEASED, SPENT, VOIDED, BudgetExceeded, Ledger, LedgerError, PrivacyLedger, compose, composition

# a release known only by its (ε, δ) (no accounting record): ε exactly representable, so sums are exact


def entry(job: str, eps: float = 1.0, delta: float = 0.0, protocol: str = "test") -> dict:
    return {"protocol": protocol, "job_id": job, "epsilon": eps, "delta": delta}


def on_disk(path: Path) -> dict:
    return json.loads(path.read_text())


def most_that_fit(eps: float, budget: float, delta: float, extra: list[dict] = ()) -> int:
    """How many entries of ε (with ``extra``) the accountant admits within (budget, δ), one after the other."""
    n = 0
    while composition([*extra, *(entry(f"n{i}", eps) for i in range(n + 1))], delta).epsilon <= budget + 1e-12:
        n += 1
    return n


def test_spend_appends_until_the_budget_then_refuses_naming_what_is_left(tmp_path):
    led = Ledger(tmp_path / "ledger.json", 10.0, 1e-3)
    assert led.spend(entry("a", 4.0))["status"] == SPENT
    led.spend(entry("b", 4.0))
    before = (tmp_path / "ledger.json").read_bytes()
    with pytest.raises(BudgetExceeded) as e:
        led.spend(entry("c", 4.0))
    # two pure ε = 4 releases compose to a hair under 8 at δ = 10⁻³; with a third, to ≈ 12 > 10
    assert str(e.value).startswith("needs ε=4, δ=0; left ε=2.00") and "with it the ledger composes to ε=11.9" in str(e.value)
    assert e.value.need_epsilon == 4.0 and 2.0 <= e.value.left_epsilon < 2.01
    assert (tmp_path / "ledger.json").read_bytes() == before  # a refused spend writes nothing
    led.spend(entry("d", 2.0))  # the rest fits
    data = on_disk(tmp_path / "ledger.json")
    assert [x["job_id"] for x in data["entries"]] == ["a", "b", "d"] and 9.99 < data["spent_epsilon"] <= 10.0
    assert data["spent_epsilon_basic"] == 10.0 and data["composition"] == "pld"


def test_delta_has_its_own_budget(tmp_path):
    led = Ledger(tmp_path / "ledger.json", 100.0, 1e-5)
    led.spend(entry("a", 1.0, 6e-6))
    with pytest.raises(BudgetExceeded, match=r"needs ε=1, δ=6e-06; left ε=99, δ=4e-06 \(with it the ledger composes to ε=inf\)"):
        led.spend(entry("b", 1.0, 6e-6))


def test_a_retry_is_not_charged_twice_and_a_different_charge_for_a_spent_job_is_refused(tmp_path):
    led = Ledger(tmp_path / "ledger.json", 10.0)
    first = led.spend(entry("job-1", 3.0))
    again = led.spend(entry("job-1", 3.0))
    assert again == first and led.spent() == (3.0, 0.0) and len(led.entries) == 1
    led.spend(entry("job-1", 3.0, protocol="other"))  # another protocol's job with the same id is another job
    assert led.spent() == (6.0, 0.0)
    with pytest.raises(LedgerError, match="already charged"):
        led.spend(entry("job-1", 5.0))
    assert led.spent() == (6.0, 0.0)


def test_a_failed_job_keeps_its_charge(tmp_path):
    led = Ledger(tmp_path / "ledger.json", 5.0)
    led.spend(entry("a", 3.0))
    assert led.mark("test", "a", FAILED, {"failure": "PEER_UNREACHABLE", "epsilon": 0.0})["status"] == FAILED
    e = led.find("test", "a")
    assert e["epsilon"] == 3.0 and e["failure"] == "PEER_UNREACHABLE"  # details never rewrite the charge
    with pytest.raises(BudgetExceeded):
        led.spend(entry("b", 3.0))
    led.spend(entry("b", 2.0))
    assert led.mark("test", "b", RELEASED)["status"] == RELEASED
    assert led.mark("test", "never-spent", FAILED) is None
    with pytest.raises(ValueError):
        led.mark("test", "a", SPENT)
    assert led.spent() == (5.0, 0.0)


def test_a_voided_charge_stays_on_disk_and_no_longer_counts(tmp_path):
    led = Ledger(tmp_path / "ledger.json", 5.0)
    led.spend(entry("a", 3.0))
    with pytest.raises(BudgetExceeded):
        led.spend(entry("b", 3.0))
    e = led.void("test", "a", "failed before any message left")
    assert e["status"] == VOIDED and e["void_reason"] == "failed before any message left" and e["epsilon"] == 3.0
    assert on_disk(tmp_path / "ledger.json")["entries"][0]["status"] == VOIDED  # durable, the charge kept for the record
    assert oct((tmp_path / "ledger.json").stat().st_mode & 0o777) == "0o600"
    assert led.spent() == (0.0, 0.0) and led.composition().epsilon == 0.0
    led.spend(entry("b", 3.0))  # the voided ε is free again
    report = led.snapshot().report()
    assert [r["status"] for r in report["entries"]] == [VOIDED, SPENT] and report["basic"]["epsilon"] == 3.0
    assert led.mark("test", "a", FAILED)["status"] == VOIDED  # a late failure mark leaves it voided
    with pytest.raises(LedgerError, match="voided"):
        led.mark("test", "a", RELEASED)
    with pytest.raises(LedgerError, match="voided"):
        led.spend(entry("a", 3.0))  # a voided job never runs again
    led.mark("test", "b", RELEASED)
    with pytest.raises(LedgerError, match="released"):
        led.void("test", "b", "too late")
    assert led.void("test", "never-spent", "x") is None


def test_the_budget_comes_from_the_configuration_not_the_file(tmp_path):
    path = tmp_path / "ledger.json"
    Ledger(path, 1000.0).spend(entry("a", 6.0))
    assert on_disk(path)["budget_epsilon"] == 1000.0
    with pytest.raises(BudgetExceeded):
        Ledger(path, 10.0).spend(entry("b", 6.0))


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"entries": {}}', '{"entries": [{"protocol": "t", "job_id": "x", "epsilon": -5}]}',
     '{"entries": [{"protocol": "t", "job_id": "x", "epsilon": "NaN"}]}'],
)
def test_an_unreadable_or_tampered_ledger_refuses_every_spend_and_is_left_alone(tmp_path, text):
    path = tmp_path / "ledger.json"
    path.write_text(text)
    with pytest.raises(LedgerError):
        Ledger(path, 10.0).spend(entry("a"))
    assert path.read_text() == text


def test_entries_need_a_job_and_a_valid_charge(tmp_path):
    led = Ledger(tmp_path / "ledger.json", 10.0)
    for bad in ({"protocol": "t", "epsilon": 1.0}, {"job_id": "x", "epsilon": 1.0}, entry("x", float("inf")), entry("x", -1.0), entry("x", 1.0, float("nan"))):
        with pytest.raises(LedgerError):
            led.spend(bad)
    assert not (tmp_path / "ledger.json").exists()


def test_basic_composition_is_one_bound_and_the_ledger_takes_the_smallest():
    assert compose([(1.0, 1e-6), (2.5, 2e-6)]) == (3.5, 3e-6)
    led = PrivacyLedger(4.0, 1e-3, [entry("a", 1.0), entry("b", 2.5)])
    c = led.composition()
    assert c.basic_epsilon == 3.5 and c.epsilon == min(c.pld_epsilon, 3.5) and 3.49 < led.spent_epsilon <= 3.5
    assert led.left()[0] == pytest.approx(4.0 - led.spent_epsilon)
    with pytest.raises(BudgetExceeded):
        led.check(0.75)


def test_files_are_0600_even_over_an_older_world_readable_ledger(tmp_path):
    path = tmp_path / "state" / "ledger.json"
    path.parent.mkdir()
    path.write_text('{"entries": []}')
    path.chmod(0o644)
    led = Ledger(path, 10.0)
    led.spend(entry("a"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(led.lock_path.stat().st_mode) == 0o600
    assert not path.with_name("ledger.json.tmp").exists()


def test_every_write_is_fsynced_file_then_folder(tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    led = Ledger(tmp_path / "ledger.json", 10.0)
    led.spend(entry("a"))
    assert synced == ["file", "dir"]
    led.mark("test", "a", FAILED)
    assert synced == ["file", "dir"] * 2
    with pytest.raises(BudgetExceeded):
        led.spend(entry("b", 20.0))
    assert synced == ["file", "dir"] * 2  # nothing written, nothing synced


def test_paper_mode_spends_the_true_epsilon_not_the_nominal_one(tmp_path):
    """Budget 10, K = 2, nominal ε = 8, d = 30: the guarantee is √30·8/4 ≈ 10.95 > 10, so the job is refused."""
    from mpdp.pathak2010.party import charge_of as pathak_entry

    cal = PathakCalibration("paper", 8.0, 0.05, 2)
    machine = SimpleNamespace(job_id="pk-paper", d=30, params=SimpleNamespace(calibration=cal, dataset="synthetic"))
    e = pathak_entry(machine)
    assert e["nominal_epsilon"] == 8.0 and e["epsilon"] == pytest.approx(30**0.5 * 8 / 4) and e["epsilon"] == cal.guarantee(30).epsilon
    led = Ledger(tmp_path / "ledger.json", 10.0)
    with pytest.raises(BudgetExceeded, match="needs ε=10.9545"):
        led.spend(e)
    corrected = pathak_entry(SimpleNamespace(job_id="pk-c", d=30, params=SimpleNamespace(calibration=PathakCalibration("corrected", 8.0, 0.05, 2), dataset="s")))
    assert led.spend(corrected)["epsilon"] == 8.0


def test_threads_never_overspend(tmp_path):
    fit = most_that_fit(1.0, 25.0, 1e-3)
    assert 25 <= fit < 40  # the accountant admits at least what basic composition did
    path = tmp_path / "ledger.json"
    ledgers = [Ledger(path, 25.0) for _ in range(4)]  # separate objects: only the file lock orders them
    refused: list[str] = []
    go = threading.Barrier(8)

    def worker(t: int) -> None:
        go.wait()
        for i in range(10):
            try:
                ledgers[t % 4].spend(entry(f"t{t}-{i}"))
            except BudgetExceeded:
                refused.append(f"t{t}-{i}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = on_disk(path)
    assert len(data["entries"]) == fit and len(refused) == 80 - fit and data["spent_epsilon"] <= 25.0
    assert len({e["job_id"] for e in data["entries"]}) == fit


def _hammer(path: str, worker: int, jobs: int, start) -> int:
    led = Ledger(path, 30.0)
    start.wait()
    spent = 0
    for i in range(jobs):
        try:
            led.spend(entry(f"p{worker}-{i}", 1.0))
            spent += 1
        except BudgetExceeded:
            pass
        led.spend(entry("shared-retry", 0.5))  # every process retries the same job: charged once in all
    return spent


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_processes_sharing_one_ledger_file_never_overspend(tmp_path):
    path = tmp_path / "ledger.json"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Manager().Event()
    with ctx.Pool(3) as pool:
        results = [pool.apply_async(_hammer, (str(path), w, 20, start)) for w in range(3)]
        start.set()
        counts = [r.get(timeout=120) for r in results]
    data = on_disk(path)
    # 60 attempts of ε = 1 and one shared ε = 0.5 against a budget of 30: exactly `fit` fit
    fit = most_that_fit(1.0, 30.0, 1e-3, [entry("shared", 0.5)])
    assert sum(counts) == fit and len(data["entries"]) == fit + 1 and data["spent_epsilon"] <= 30.0 and 29 <= fit < 60
    assert sum(e["job_id"] == "shared-retry" for e in data["entries"]) == 1


def test_party_config_budget_delta_defaults_to_the_old_value_and_is_checked(tmp_path):
    from pydantic import ValidationError

    from mpdp_services.common.config import PartyConfig

    base = {"name": "p", "tls": {"cert": "c", "key": "k", "ca": "a"}, "curator": {"address": "x:1", "name": "curator"}}
    assert PartyConfig(**base).budget_delta == 1e-3
    assert PartyConfig(**base, budget_delta=1e-6).budget_delta == 1e-6
    for bad in ({"budget_delta": -1e-6}, {"budget_epsilon": -1.0}, {"budget_epsilon": float("inf")}):
        with pytest.raises(ValidationError):
            PartyConfig(**base, **bad)


def test_dca_submit_spends_from_the_sites_party_ledger_or_explicit_options(tmp_path):
    import click

    from mpdp_services.cli.dca import client_ledger

    site = tmp_path / "site"
    site.mkdir()
    with pytest.raises(click.ClickException, match="no party.yaml"):
        client_ledger(site, None, None, None)
    led = client_ledger(site, str(tmp_path / "l.json"), 2.0, None)
    assert (led.path, led.budget_epsilon, led.budget_delta) == (tmp_path / "l.json", 2.0, 1e-3)
    (site / "party.yaml").write_text(
        "name: party-9\ntls: {cert: site.crt, key: site.key, ca: ca.crt}\ncurator: {address: 'x:1', name: curator}\n"
        "ledger: state/ledger.json\nbudget_epsilon: 3.5\nbudget_delta: 1.0e-6\n"
    )
    led = client_ledger(site, None, None, None)  # the same file, under the same lock, as the party service
    assert (led.path, led.budget_epsilon, led.budget_delta) == (site.resolve() / "state" / "ledger.json", 3.5, 1e-6)

"""How many jobs fit in one party's budget under basic composition and under the ledger's accountant
(docs/protocols/accounting.md; run from anywhere: `python tools/accounting_table.py [--json]`).

Each job is built by the code that builds real ledger entries: a DCA job is one corrected Gaussian DCA release
(``DcaParams.ledger_entry``) at (ε_job, δ_job); a regression fit is the two rounds of Algorithm 2 with the
0.3 / 0.7 split of (ε_job, δ_job) (``mpdp.regression.ledger_entry``); a pure-ε job (Pathak corrected, HCB16,
LMGC) is a pure ε_job release. A job fits when the ledger with it composes to at most the budget ε at the
budget δ — exactly :meth:`mpdp.ledger.PrivacyLedger.check_entry` — and basic composition is the same rule with
ε and δ added up.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpdp import accounting  # noqa: E402
from mpdp.dca.params import DcaParams  # noqa: E402
from mpdp.ledger import composition  # noqa: E402
from mpdp.regression import budget_split, ledger_entry, main_round_spec, std_round_spec  # noqa: E402

BUDGET = (10.0, 1e-5)
EPSILONS = (0.1, 0.5, 1.0, 2.0)
JOB_DELTA = 1e-8  # per job: small enough that basic composition's Σδ does not bind before its Σε does


def dca_job(eps: float, delta: float, i: int) -> list[dict]:
    p = DcaParams(job_id=f"dca-{i}", dimension=10, clients=10, max_missing=2, epsilon=eps, delta=delta, sensitivity=1.0, nodes=("a", "b"))
    return [p.ledger_entry()]


def regression_job(eps: float, delta: float, i: int) -> list[dict]:
    b = budget_split(eps, delta)
    return [ledger_entry(std_round_spec([7.5] * 12, *b.std, "corrected"), f"fit-{i}/std", seeded=False),
            ledger_entry(main_round_spec([1.0] * 12, *b.main, "corrected"), f"fit-{i}/main", seeded=False)]


def pure_job(eps: float, delta: float, i: int) -> list[dict]:
    return [{"protocol": "pure", "job_id": f"p-{i}", "epsilon": eps, "delta": 0.0, "accounting": accounting.pure_epsilon("Laplace")}]


def _entries(job, eps: float, k: int) -> list[dict]:
    """k jobs: one built by the real code, the others the same mechanism under other job ids."""
    one = job(eps, JOB_DELTA, 0)
    return [{**e, "job_id": f"{e['job_id']}#{i}"} for i in range(k) for e in one]


def fits(job, eps: float, k: int) -> bool:
    return composition(_entries(job, eps, k), BUDGET[1], BUDGET[0]).epsilon <= BUDGET[0] + 1e-12


def basic_fits(job, eps: float, k: int) -> bool:
    entries = _entries(job, eps, k)
    return math.fsum(e["epsilon"] for e in entries) <= BUDGET[0] + 1e-12 and math.fsum(e["delta"] for e in entries) <= BUDGET[1] * (1 + 1e-12)


def most(pred, job, eps: float) -> int:
    """The largest k with pred(k) (monotone in k): doubling, then bisection."""
    lo, hi = 0, 1
    while pred(job, eps, hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pred(job, eps, mid) else (lo, mid)
    return lo


def table() -> list[dict]:
    rows = []
    for name, job in (("DCA job (Gaussian)", dca_job), ("regression fit (2 Gaussian rounds)", regression_job), ("pure-ε job (Laplace)", pure_job)):
        for eps in EPSILONS:
            rows.append({"job": name, "epsilon": eps, "delta": JOB_DELTA if job is not pure_job else 0.0,
                         "basic": most(basic_fits, job, eps), "accountant": most(fits, job, eps)})
    return rows


def main() -> None:
    rows = table()
    if "--json" in sys.argv:
        print(json.dumps({"budget": {"epsilon": BUDGET[0], "delta": BUDGET[1]}, "rows": rows}, indent=2))
        return
    print(f"| job | per-job (ε, δ) | fit, basic composition | fit, accountant | × |\n|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['job']} | ({r['epsilon']:g}, {r['delta']:g}) | {r['basic']} | {r['accountant']} | {r['accountant'] / r['basic']:.1f} |")


if __name__ == "__main__":
    main()

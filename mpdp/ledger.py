"""A party's privacy ledger (spec decision 9): every release it took part in, composed by basic composition.

The ledger refuses a job whose ε would push the total over the configured budget. It is pure
bookkeeping; the party service persists it (JSON) after every change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


class BudgetExceeded(ValueError):
    """A job would exceed the party's privacy budget."""


@dataclass
class PrivacyLedger:
    budget_epsilon: float
    budget_delta: float = 1e-3
    entries: list[dict] = field(default_factory=list)

    @property
    def spent_epsilon(self) -> float:
        return sum(float(e.get("epsilon", 0.0)) for e in self.entries)

    @property
    def spent_delta(self) -> float:
        return sum(float(e.get("delta", 0.0)) for e in self.entries)

    def check(self, epsilon: float, delta: float = 0.0) -> None:
        """Raise BudgetExceeded unless (spent + ε, spent + δ) stays within budget (basic composition)."""
        if self.spent_epsilon + epsilon > self.budget_epsilon + 1e-12:
            raise BudgetExceeded(
                f"job needs ε={epsilon:g} but only {self.budget_epsilon - self.spent_epsilon:g} of the budget {self.budget_epsilon:g} is left"
            )
        if self.spent_delta + delta > self.budget_delta + 1e-15:
            raise BudgetExceeded(f"job needs δ={delta:g} but only {self.budget_delta - self.spent_delta:g} is left")

    def record(self, entry: dict) -> None:
        if any(e.get("job_id") == entry.get("job_id") and e.get("protocol") == entry.get("protocol") for e in self.entries):
            return
        self.entries.append(dict(entry))

    def to_json(self) -> str:
        return json.dumps({"budget_epsilon": self.budget_epsilon, "budget_delta": self.budget_delta, "entries": self.entries, "spent_epsilon": self.spent_epsilon, "spent_delta": self.spent_delta}, indent=2)

    @classmethod
    def from_json(cls, text: str, budget_epsilon: float) -> "PrivacyLedger":
        data = json.loads(text)
        return cls(budget_epsilon=budget_epsilon, budget_delta=float(data.get("budget_delta", 1e-3)), entries=list(data.get("entries", [])))

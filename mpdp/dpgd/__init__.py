"""Multiparty DP learning over the DCA: full-batch DP gradient descent with a Böhning-preconditioned step, and its
one-round special case, the functional mechanism (docs/protocols/dpgd.md).

* :mod:`~mpdp.dpgd.model` — the loss, the per-row clipped gradient sums and second moments a party computes;
* :mod:`~mpdp.dpgd.accounting` — zCDP/GDP composition of the rounds and the exact conversion to (ε, δ);
* :mod:`~mpdp.dpgd.plan` — the public plan (rounds, Δ_r, σ_r, DCA jobs), the party's vector, the curator's steps;
* :mod:`~mpdp.dpgd.learner` — the whole job in one process, every round through the real DCA core;
* :mod:`~mpdp.dpgd.reference` — the central reference (Chaudhuri et al. 2011 objective perturbation);
* :mod:`~mpdp.dpgd.tuning` — how the public defaults were fixed on simulated data.
"""

from mpdp.dpgd.model import BINARY, SOFTMAX, Task
from mpdp.dpgd.plan import ADD_REMOVE, REPLACE, DpgdCurator, DpgdPlan, auto_rounds, party_vector

__all__ = ["ADD_REMOVE", "BINARY", "REPLACE", "SOFTMAX", "DpgdCurator", "DpgdPlan", "Task", "auto_rounds", "party_vector"]

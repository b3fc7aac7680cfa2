"""DCA: the Distributed Compute Algorithm of Heikkilä et al. (NIPS 2017), network-free (the paper's Sec. 3.1, Algorithm 1).

Guarantee: the released sum Σ_{i∈A}(z_i + η_i) is (ε, δ)-DP for replace-one adjacency with ℓ2-sensitivity
Δ₂, when at most T clients collude or drop out and at least one of the M compute nodes is honest; each
client adds N(0, σ_std²/(N−T−1)) (Thm 1). No compute node, router or the aggregator sees a client's
unmasked contribution: node k sees one additive share of u_i in Z_2^64, the aggregator only the M partial
sums. Leaks: the set of clients that took part (ids), N, d and the public parameters.

Layout (math first, then roles):

* :mod:`mpdp.dca.params` — :class:`DcaParams` (the job), validation, σ_client, the guarantee, headroom;
* :mod:`mpdp.dca.mechanism` — the distributed Gaussian mechanism (calibration, noise, refusal);
* :mod:`mpdp.dca.discrete` — the `discrete-gaussian` noise mode: exact integer noise (CKS20), conditional
  rounding, ρ-zCDP and (ε, δ) accounting (KLS21), the sum's wrap-around window;
* :mod:`mpdp.dca.sharing` — M-way sharing in Z_2^64, seed-compressed sharing, packing, set digests;
* :mod:`mpdp.dca.states` — the one transition table; :mod:`mpdp.dca.engine` — the machine engine;
* :mod:`mpdp.dca.client`, :mod:`mpdp.dca.compute_node`, :mod:`mpdp.dca.aggregator` — the roles;
* :mod:`mpdp.dca.driver` — the in-memory driver.

No module here imports grpc, asyncio or sockets (tests/dca checks it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpdp.dca.aggregator import AggregatorMachine
    from mpdp.dca.client import ClientCohort, ClientMachine
    from mpdp.dca.compute_node import ComputeNodeMachine
    from mpdp.dca.engine import Reply
    from mpdp.dca.errors import InsufficientNoise, InvalidJob
    from mpdp.dca.params import DcaParams

# The names below load with their module on first use: importing one submodule (the mechanism's calibration, the
# job's parameters) does not load the roles and the field arithmetic they compile (numba).
_HOMES = {"AggregatorMachine": "aggregator", "ClientCohort": "client", "ClientMachine": "client", "ComputeNodeMachine": "compute_node",
          "Reply": "engine", "InsufficientNoise": "errors", "InvalidJob": "errors", "DcaParams": "params"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mpdp.dca' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mpdp.dca.{home}"), name)


__all__ = [
    "AggregatorMachine",
    "ClientCohort",
    "ClientMachine",
    "ComputeNodeMachine",
    "DcaParams",
    "InsufficientNoise",
    "InvalidJob",
    "Reply",
]

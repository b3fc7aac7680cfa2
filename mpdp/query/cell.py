"""One released cell of a DP query (an estimate, its 95 % interval, its noise scale) and the sub-Gaussian tail factor
its intervals use (docs/protocols/query.md, "Intervals"): shared by the query release and the model evaluation."""

from __future__ import annotations

import math
from dataclasses import dataclass


def z_subgaussian(alpha: float) -> float:
    """t/√V with P(|E| ≥ t) ≤ α for E sub-Gaussian with variance proxy V: √(2·ln(2/α))."""
    return math.sqrt(2.0 * math.log(2.0 / alpha))


@dataclass(frozen=True)
class Cell:
    estimate: float  # NaN: undefined (an average over no row, a quantile of an empty group)
    low: float
    high: float
    noise_sd: float  # the noise's standard deviation behind the cell (quantile: of each bin count; avg: delta method)

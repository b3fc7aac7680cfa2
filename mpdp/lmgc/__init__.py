"""Differentially private large-margin multiclass Gaussian classifiers (Pathak & Raj 2010).

Network-free core:

* :mod:`mpdp.lmgc.params` — Φ_c parameterisation (eqs. (1)–(3)), isometric coordinates;
* :mod:`mpdp.lmgc.huber` — Huber-smoothed hinge (eq. (6));
* :mod:`mpdp.lmgc.objective` — J_p, gradients, per-sample gradients and Hessians;
* :mod:`mpdp.lmgc.solver` — L-BFGS/Newton–CG (corrected) and projected FISTA (PSD SDP);
* :mod:`mpdp.lmgc.privacy` — corrected (ours, after CMS11) and paper (not private) calibrations;
* :mod:`mpdp.lmgc.estimator` — :class:`LargeMarginGaussianClassifier` (scikit-learn API);
* :mod:`mpdp.lmgc.aggregate` — parameter averaging across parties with its sensitivity;
* :mod:`mpdp.lmgc.baselines` — (DP) multinomial logistic regression for the evaluation.
"""

from mpdp.lmgc.aggregate import AggregateRelease, SensitivityError, aggregate_average, averaging_sensitivity
from mpdp.lmgc.estimator import LargeMarginGaussianClassifier
from mpdp.lmgc.privacy import CorrectedCalibration, PaperCalibration, PrivacyError
from mpdp.lmgc.solver import ConvergenceError, UnboundedObjectiveError

__all__ = [
    "AggregateRelease",
    "ConvergenceError",
    "CorrectedCalibration",
    "LargeMarginGaussianClassifier",
    "PaperCalibration",
    "PrivacyError",
    "SensitivityError",
    "UnboundedObjectiveError",
    "aggregate_average",
    "averaging_sensitivity",
]

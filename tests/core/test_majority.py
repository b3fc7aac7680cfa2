"""A classifier's accuracy is stated against the majority rate of the rows it is scored on, and one that is no better
than always predicting the majority class says so (`mpdp predict`'s output and the Python API's ``evaluate``).

The rows: scikit-learn's breast-cancer data (public, shipped with scikit-learn), 357 benign and 212 malignant, so
the majority rate is 357/569. A fixed linear classifier that calls every row malignant, and one that is the negative
of a least-squares fit (worse than a coin), do not beat it; the least-squares fit itself does."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from mpdp.results import LinearClassifier, against_majority, majority_rate, majority_warning
from mpdp_services.cli.jobs import _print_prediction


@pytest.fixture(scope="module")
def rows():
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, np.where(y == 1, "benign", "malignant")


def _fit(X, labels) -> np.ndarray:
    t = np.where(labels == "malignant", 1.0, -1.0)
    return np.linalg.lstsq(X, t, rcond=None)[0]


def test_the_majority_rate_is_the_share_of_the_most_common_label(rows):
    _, y = rows
    assert majority_rate(y) == 357 / 569
    assert majority_rate([1.0, 1, "1", -1]) == 0.75  # labels compared as text, as the protocols send them
    with pytest.raises(ValueError):
        majority_rate([])


def test_a_classifier_worse_than_the_majority_class_is_flagged(rows):
    X, y = rows
    w = _fit(X, y)
    good = LinearClassifier(w, ("benign", "malignant")).evaluate(X, y)
    assert good["accuracy"] > good["majority_rate"] == 357 / 569 and good["beats_majority"] is True
    assert majority_warning(good) is None
    bad = LinearClassifier(-w, ("benign", "malignant")).evaluate(X, y)  # the fit's sign flipped: mostly wrong
    assert bad["accuracy"] < 0.5 and bad["beats_majority"] is False
    assert majority_warning(bad) == f"(no better than always predicting the majority class, {357 / 569:.4g})"
    # the constant "malignant" classifier (every row on the positive side) scores the minority rate
    constant = LinearClassifier(np.zeros(X.shape[1]), ("malignant", "benign"))  # wᵀx = 0: ties go to classes[0]
    c = constant.evaluate(X, y)
    assert c["accuracy"] == pytest.approx(212 / 569) and c["beats_majority"] is False
    # equal to the majority rate is no better than it
    assert against_majority(357 / 569, 357 / 569)["beats_majority"] is False


def test_predict_prints_the_majority_rate_and_a_warning_line(rows, capsys):
    X, y = rows
    bad = LinearClassifier(-_fit(X, y), ("benign", "malignant")).evaluate(X, y)
    out = {"job_id": "hm-000000000001", "rows": len(y), "predicted": {"benign": 1, "malignant": 2}, **bad, "guarantee": "…"}
    _print_prediction(out, "hamm2016", as_json=False)
    lines = capsys.readouterr().out.splitlines()
    i = lines.index(f"beats_majority: {False}")
    assert lines[i - 1] == f"majority_rate: {357 / 569}" and lines[i - 2].startswith("accuracy: ")
    assert lines[i + 1] == f"(no better than always predicting the majority class, {357 / 569:.4g})"
    _print_prediction(out, "hamm2016", as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert doc["majority_rate"] == 357 / 569 and doc["beats_majority"] is False
    good = {**out, **LinearClassifier(_fit(X, y), ("benign", "malignant")).evaluate(X, y)}
    _print_prediction(good, "hamm2016", as_json=False)
    assert "no better than" not in capsys.readouterr().out


def test_evaluate_states_the_majority_rate_of_its_released_counts():
    from mpdp_services.cli.evaluate import _versus_majority

    # 60 positives, 140 negatives released (noisy counts, one clamped at 0); a released accuracy of 0.65 < 0.7
    out = {"accuracy": 0.65, "true_positive": 50.0, "false_negative": 10.0, "false_positive": 60.0, "true_negative": 80.0}
    assert _versus_majority(out) == {"majority_rate": 0.7, "beats_majority": False}
    assert _versus_majority({**out, "accuracy": 0.9})["beats_majority"] is True
    assert _versus_majority({**out, "false_negative": -5.0})["majority_rate"] == pytest.approx(140 / 190)
    assert _versus_majority({**out, "accuracy": None}) == {}
    assert _versus_majority({"accuracy": 0.5, "true_positive": -1.0, "false_negative": 0.0, "false_positive": 0.0, "true_negative": 0.0}) == {}

"""Datasets for the LMGC evaluation (issue 7): scikit-learn's digits and wine, and KDD-99 attack categories.

Every loader returns rows already scaled and clipped to ‖x‖ ≤ 1 (so ‖(x, 1)‖ ≤ R = √2, the bound
the privacy analysis uses, lmgc.md §2.5), and a train/test split drawn with numpy's generator
(public simulation randomness; never used for DP noise).

What the preprocessing costs in privacy (stated in every run's output):
* digits: x/16 ∈ [0,1]^64 divided by the constant 8, so ‖x‖ ≤ 1 for every possible image. Data-independent.
* wine: standardised with the *training split's* mean and standard deviation, then divided by
  1.5·√d and clipped. Those statistics are not privatised (the usual simplification of DP-ERM
  experiments); the ε covers the classifier only.
* kdd99: log1p of the 38 numeric features standardised with statistics of a *disjoint* public
  slice of the file (not used for training or testing), fixed one-hot vocabularies for
  protocol_type (3) and flag (11), divided by 1.5·√d and clipped. The high-cardinality
  ``service`` feature (≈70 values) is dropped to keep d = 52 (the DP noise dimension grows as d²).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from mpdp.data.loaders import DatasetError

KDD_TRAIN_FILE = "kddcup.data_10_percent.gz"
KDD_TYPES_FILE = "training_attack_types.txt"
KDD_CATEGORIES = ("normal", "dos", "probe", "r2l", "u2r")
KDD_PROTOCOLS = ("tcp", "udp", "icmp")
KDD_FLAGS = ("SF", "S0", "S1", "S2", "S3", "REJ", "RSTO", "RSTR", "RSTOS0", "SH", "OTH")
_KDD_SYMBOLIC = (1, 2, 3)  # protocol_type, service, flag
DATASETS = ("digits", "wine", "kdd99")


@dataclass(frozen=True)
class Split:
    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]
    preprocessing: str
    extra: dict = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])


def clip_unit(X: np.ndarray) -> np.ndarray:
    """Scale rows with ‖x‖ > 1 onto the unit sphere."""
    norms = np.linalg.norm(X, axis=1)
    return X / np.maximum(1.0, norms)[:, None]


def stratified_split(y: np.ndarray, test_frac: float, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays (train, test), each class split in proportion test_frac (at least one test row per class)."""
    train, test = [], []
    for c in np.unique(y):
        idx = gen.permutation(np.flatnonzero(y == c))
        k = max(1, int(round(test_frac * len(idx)))) if len(idx) > 1 else 0
        test.append(idx[:k])
        train.append(idx[k:])
    return gen.permutation(np.concatenate(train)), gen.permutation(np.concatenate(test))


def load_digits_split(seed: int, test_frac: float = 0.3) -> Split:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0 / 8.0  # ‖x‖ ≤ √64/8 = 1 for every 8×8 image with values in [0, 16]
    tr, te = stratified_split(y, test_frac, np.random.default_rng(seed))  # public train/test split
    return Split("digits", X[tr], y[tr], X[te], y[te], tuple(str(i) for i in range(10)),
                 "x/16/8 (data-independent, ‖x‖ ≤ 1 always)")


def load_wine_split(seed: int, test_frac: float = 0.3) -> Split:
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    tr, te = stratified_split(y, test_frac, np.random.default_rng(seed))  # public train/test split
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    sd[sd == 0] = 1.0
    kappa = 1.5 * np.sqrt(X.shape[1])
    Z = clip_unit((X - mu) / sd / kappa)
    return Split("wine", Z[tr], y[tr], Z[te], y[te], ("class_0", "class_1", "class_2"),
                 "standardised with training-split statistics (NOT privatised), /(1.5·√d), clipped to ‖x‖ ≤ 1")


def kdd_paths(data_dir: str | Path) -> tuple[Path, Path]:
    """The KDD-99 files under ``data_dir`` (the shared data folder or its kddcup99/ subfolder)."""
    base = Path(data_dir)
    if (base / "kddcup99").is_dir():
        base = base / "kddcup99"
    paths = (base / KDD_TRAIN_FILE, base / KDD_TYPES_FILE)
    for p in paths:
        if not p.is_file():
            raise DatasetError(f"KDD-99 file {p} not found; pass --data pointing at the folder holding {KDD_TRAIN_FILE}")
    return paths


def kdd_attack_categories(types_file: Path) -> dict[str, str]:
    """attack name → category from training_attack_types.txt, plus normal → normal."""
    mapping = {"normal": "normal"}
    for line in types_file.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            mapping[parts[0]] = parts[1]
    if set(mapping.values()) != set(KDD_CATEGORIES):
        raise DatasetError(f"{types_file} does not map to the five categories {KDD_CATEGORIES}")
    return mapping


def _kdd_features(rows: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(numeric 38 columns, one-hot protocol+flag 14 columns) for parsed KDD rows (label removed)."""
    numeric_cols = [j for j in range(41) if j not in _KDD_SYMBOLIC]
    num = np.array([[float(r[j]) for j in numeric_cols] for r in rows])
    onehot = np.zeros((len(rows), len(KDD_PROTOCOLS) + len(KDD_FLAGS)))
    pi = {p: i for i, p in enumerate(KDD_PROTOCOLS)}
    fi = {f: len(KDD_PROTOCOLS) + i for i, f in enumerate(KDD_FLAGS)}
    for k, r in enumerate(rows):
        if r[1] in pi:
            onehot[k, pi[r[1]]] = 1.0
        if r[3] in fi:
            onehot[k, fi[r[3]]] = 1.0
    return np.log1p(np.maximum(num, 0.0)), onehot


@lru_cache(maxsize=1)
def _read_kdd(data_file: str, types_file: str) -> tuple[tuple[str, ...], np.ndarray]:
    """All lines of the KDD file and their category indices (cached: runs differ only in sampling)."""
    cat_of = kdd_attack_categories(Path(types_file))
    with gzip.open(data_file, "rt") as fh:
        lines = tuple(fh.read().splitlines())
    labels = [ln.rsplit(",", 1)[-1].rstrip(".") for ln in lines]
    unknown = {lab for lab in set(labels) if lab not in cat_of}
    if unknown:
        raise DatasetError(f"{data_file} has labels without a category: {sorted(unknown)}")
    cat_index = {c: i for i, c in enumerate(KDD_CATEGORIES)}
    return lines, np.array([cat_index[cat_of[lab]] for lab in labels])


def load_kdd99_split(data_dir: str | Path, seed: int, *, per_class: int = 600, public_rows: int = 2000,
                     test_frac: float = 0.3) -> Split:
    """5-class KDD-99 (normal, dos, probe, r2l, u2r) from the 10% training file.

    Up to ``per_class`` rows of each category (u2r has only 52) are drawn without replacement; a
    disjoint uniform sample of ``public_rows`` rows provides the standardisation statistics.
    """
    data_file, types_file = kdd_paths(data_dir)
    lines, y_all = _read_kdd(str(data_file), str(types_file))
    gen = np.random.default_rng(seed)  # public simulation choice (subsampling rows); DP noise comes from the Drbg
    chosen = []
    for c in range(len(KDD_CATEGORIES)):
        idx = np.flatnonzero(y_all == c)
        chosen.append(gen.choice(idx, size=min(per_class, len(idx)), replace=False))
    chosen_idx = np.concatenate(chosen)
    rest = np.setdiff1d(np.arange(len(lines)), chosen_idx)
    public_idx = gen.choice(rest, size=min(public_rows, len(rest)), replace=False)

    def parse(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = [lines[i].split(",")[:41] for i in idx]
        return _kdd_features(rows)

    num, oh = parse(chosen_idx)
    pub_num, _ = parse(public_idx)
    mu, sd = pub_num.mean(axis=0), pub_num.std(axis=0)
    sd[sd == 0] = 1.0
    X = np.hstack([(num - mu) / sd, oh])
    X = clip_unit(X / (1.5 * np.sqrt(X.shape[1])))
    y = y_all[chosen_idx]
    tr, te = stratified_split(y, test_frac, gen)
    counts = {KDD_CATEGORIES[c]: int(np.sum(y == c)) for c in range(len(KDD_CATEGORIES))}
    return Split("kdd99", X[tr], y[tr], X[te], y[te], KDD_CATEGORIES,
                 "log1p numeric (38) standardised with a disjoint public slice, one-hot protocol (3) and flag (11), "
                 "service dropped, /(1.5·√d), clipped to ‖x‖ ≤ 1; class-capped sample",
                 {"sampled_per_class": counts, "source": str(data_file)})


def load_split(name: str, seed: int, data_dir: str | Path | None = None, **kwargs) -> Split:
    if name == "digits":
        return load_digits_split(seed)
    if name == "wine":
        return load_wine_split(seed)
    if name == "kdd99":
        if data_dir is None:
            raise DatasetError("kdd99 needs --data DIR (the folder holding kddcup99/)")
        return load_kdd99_split(data_dir, seed, **kwargs)
    raise DatasetError(f"unknown dataset {name!r}; use one of {DATASETS}")

"""Datasets for the LMGC evaluation: scikit-learn's digits and wine, and KDD-99 attack categories.

Every loader returns rows already scaled and clipped to ‖x‖ ≤ 1 (so ‖(x, 1)‖ ≤ R = √2, the bound
the privacy analysis uses), and a train/test split drawn with numpy's generator
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
  Parsing and vocabularies are shared with the HCB16 ensembles in :mod:`mpdp.data.kdd99`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from mpdp.data import kdd99
from mpdp.data.loaders import DatasetError

KDD_TRAIN_FILE = kdd99.TRAIN_FILE
KDD_TYPES_FILE = kdd99.TYPES_FILE
KDD_CATEGORIES = kdd99.CATEGORIES
KDD_PROTOCOLS = ("tcp", "udp", "icmp")
KDD_FLAGS = ("SF", "S0", "S1", "S2", "S3", "REJ", "RSTO", "RSTR", "RSTOS0", "SH", "OTH")
_KDD_SYMBOLIC_SHARED = (0, 2)  # protocol_type, flag: columns of KddRaw.symbolic (service, column 1, is dropped)
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
    return kdd99.kdd_file(data_dir, KDD_TRAIN_FILE), kdd99.kdd_file(data_dir, KDD_TYPES_FILE)


def kdd_attack_categories(types_file: Path) -> dict[str, str]:
    """attack name → category from training_attack_types.txt, plus normal → normal."""
    return kdd99.attack_categories(types_file)


def _kdd_features(raw: kdd99.KddRaw, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log1p of the 38 numeric columns, one-hot protocol+flag 14 columns) for rows ``idx``."""
    onehot = np.zeros((len(idx), len(KDD_PROTOCOLS) + len(KDD_FLAGS)))
    rows = np.arange(len(idx))
    # map the shared vocabularies' indices onto this experiment's column order (service is dropped)
    for k, (vocab, ours, offset) in enumerate(((kdd99.PROTOCOLS, KDD_PROTOCOLS, 0), (kdd99.FLAGS, KDD_FLAGS, len(KDD_PROTOCOLS)))):
        col = _KDD_SYMBOLIC_SHARED[k]
        lut = np.array([ours.index(v) if v in ours else -1 for v in vocab] + [-1], dtype=np.int64)
        j = lut[raw.symbolic[idx, col].astype(np.int64)]  # −1 (unseen) indexes the trailing −1
        ok = j >= 0
        onehot[rows[ok], offset + j[ok]] = 1.0
    return kdd99.log_numeric(raw.numeric[idx]), onehot


@lru_cache(maxsize=1)
def _read_kdd(data_file: str, types_file: str) -> tuple[kdd99.KddRaw, np.ndarray]:
    """The parsed KDD file and its category indices (cached: runs differ only in sampling)."""
    cat_of = kdd_attack_categories(Path(types_file))
    raw = kdd99.parse_kdd_file(data_file)
    y = kdd99.category_labels(raw, cat_of)
    if np.any(y < 0):
        unknown = sorted({raw.label_names[c] for c in np.unique(raw.label[y < 0])})
        raise DatasetError(f"{data_file} has labels without a category: {unknown}")
    return raw, y


def load_kdd99_split(data_dir: str | Path, seed: int, *, per_class: int = 600, public_rows: int = 2000,
                     test_frac: float = 0.3) -> Split:
    """5-class KDD-99 (normal, dos, probe, r2l, u2r) from the 10% training file.

    Up to ``per_class`` rows of each category (u2r has only 52) are drawn without replacement; a
    disjoint uniform sample of ``public_rows`` rows provides the standardisation statistics.
    """
    data_file, types_file = kdd_paths(data_dir)
    raw, y_all = _read_kdd(str(data_file), str(types_file))
    gen = np.random.default_rng(seed)  # public simulation choice (subsampling rows); DP noise comes from the Drbg
    chosen = []
    for c in range(len(KDD_CATEGORIES)):
        idx = np.flatnonzero(y_all == c)
        chosen.append(gen.choice(idx, size=min(per_class, len(idx)), replace=False))
    chosen_idx = np.concatenate(chosen)
    rest = np.setdiff1d(np.arange(len(raw)), chosen_idx)
    public_idx = gen.choice(rest, size=min(public_rows, len(rest)), replace=False)

    num, oh = _kdd_features(raw, chosen_idx)
    pub_num, _ = _kdd_features(raw, public_idx)
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

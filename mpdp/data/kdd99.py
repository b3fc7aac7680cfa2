"""KDD Cup 1999 (network intrusion detection): parsing, fixed one-hot vocabulary, unit-ball features.

Shared by the experiments that use KDD-99 (the LMGC evaluation, ``mpdp.lmgc.datasets``, and the HCB16
ensembles, ``mpdp.hamm2016``). Files (read in place, ``--data`` points at the shared data folder or at its
``kddcup99/`` subfolder): ``kddcup.data_10_percent.gz`` (494,021 training rows),
``corrected.gz`` (311,029 labelled test rows), ``training_attack_types.txt`` (attack → category).
Each row is 41 comma-separated features in the order of ``kddcup.names`` and a label such as
``smurf.``; columns 1–3 (0-based) ``protocol_type``, ``service``, ``flag`` are symbolic, the
other 38 are numbers.

Feature map (Hamm, Cao & Belkin 2016, §6.2: "we change categorical attributes to one-hot vectors to
get d = 123 dimensional features"):

* 38 numeric columns: ``log1p(max(x, 0))``, then standardised with mean and s.d. of a **public**
  reference set (in the HCB16 simulation: the auxiliary unlabeled rows, which that setting treats as
  public (HCB16 Sec. 3.3) — so using their statistics costs no privacy);
* one-hot ``protocol_type`` (3), ``service`` (71), ``flag`` (11) with the FIXED vocabularies below;
  a value outside the vocabulary maps to an all-zero block;
* d = 38 + 3 + 71 + 11 = **123**, the paper's d. How the vocabulary was derived (once, by hand):
  ``zcat F | cut -d, -f2|3|4 | sort -u`` on both files gives 3 protocols, 11 flags, 66 services
  in the 10% file and one more service, ``icmp`` (2 rows), in ``corrected.gz`` only. The full
  ``kddcup.data`` (not in ../shared/data) has 70 services: the 66 plus ``aol``, ``harvest``,
  ``http_2784``, ``http_8001`` (the list published in the NSL-KDD ARFF header, which is derived
  from the full file). The vocabulary of full training + test data is therefore 70 + 1 = 71
  services, which is exactly what reproduces d = 123. The four full-file-only services never occur
  in our two files: their columns are identically zero here and only fix the dimension (which
  matters for DP: the noise norm grows like d).
* the row ``[z, one-hot]`` is divided by the constant ``ROW_SCALE`` (= 1) and then clipped to ‖x‖ ≤ 1
  (rows with a larger norm are scaled onto the unit sphere), as the sensitivity analysis needs. With
  divisor 1 almost every row ends up with ‖x‖ = 1 (row normalisation); see ``ROW_SCALE``.

Parsing: the file is decompressed in memory, numbers are parsed by ``np.loadtxt`` (C parser) and
the three symbolic columns and the label by one ``str.split`` per line; about 2.5 s for the 10%
file and 1.5 s for ``corrected.gz``. :func:`read_kdd_file` caches the parsed arrays in-process.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from mpdp.data.loaders import DatasetError

TRAIN_FILE = "kddcup.data_10_percent.gz"
TEST_FILE = "corrected.gz"
TYPES_FILE = "training_attack_types.txt"

CATEGORIES = ("normal", "dos", "probe", "r2l", "u2r")
BINARY_CLASSES = ("normal", "attack")  # class index 1 ("attack") plays the paper's +1

SYMBOLIC_COLUMNS = (1, 2, 3)  # protocol_type, service, flag
NUMERIC_COLUMNS = tuple(j for j in range(41) if j not in SYMBOLIC_COLUMNS)
NUMERIC_NAMES = (
    "duration", "src_bytes", "dst_bytes", "land", "wrong_fragment", "urgent", "hot", "num_failed_logins",
    "logged_in", "num_compromised", "root_shell", "su_attempted", "num_root", "num_file_creations", "num_shells",
    "num_access_files", "num_outbound_cmds", "is_host_login", "is_guest_login", "count", "srv_count",
    "serror_rate", "srv_serror_rate", "rerror_rate", "srv_rerror_rate", "same_srv_rate", "diff_srv_rate",
    "srv_diff_host_rate", "dst_host_count", "dst_host_srv_count", "dst_host_same_srv_rate",
    "dst_host_diff_srv_rate", "dst_host_same_src_port_rate", "dst_host_srv_diff_host_rate",
    "dst_host_serror_rate", "dst_host_srv_serror_rate", "dst_host_rerror_rate", "dst_host_srv_rerror_rate",
)

# Fixed vocabularies (see the module docstring for how they were derived). Order = column order.
PROTOCOLS = ("tcp", "udp", "icmp")
SERVICES = (
    # the 70 services of the full KDD-99 training file (NSL-KDD ARFF header order) ...
    "aol", "auth", "bgp", "courier", "csnet_ns", "ctf", "daytime", "discard", "domain", "domain_u",
    "echo", "eco_i", "ecr_i", "efs", "exec", "finger", "ftp", "ftp_data", "gopher", "harvest",
    "hostnames", "http", "http_2784", "http_443", "http_8001", "imap4", "IRC", "iso_tsap", "klogin", "kshell",
    "ldap", "link", "login", "mtp", "name", "netbios_dgm", "netbios_ns", "netbios_ssn", "netstat", "nnsp",
    "nntp", "ntp_u", "other", "pm_dump", "pop_2", "pop_3", "printer", "private", "red_i", "remote_job",
    "rje", "shell", "smtp", "sql_net", "ssh", "sunrpc", "supdup", "systat", "telnet", "tftp_u",
    "tim_i", "time", "urh_i", "urp_i", "uucp", "uucp_path", "vmnet", "whois", "X11", "Z39_50",
    # ... and the one that occurs only in corrected.gz
    "icmp",
)
SERVICES_NOT_IN_FILES = ("aol", "harvest", "http_2784", "http_8001")  # full-file-only: zero columns here
FLAGS = ("OTH", "REJ", "RSTO", "RSTOS0", "RSTR", "S0", "S1", "S2", "S3", "SF", "SH")
VOCABULARIES = (PROTOCOLS, SERVICES, FLAGS)

N_NUMERIC = len(NUMERIC_COLUMNS)  # 38
N_FEATURES = N_NUMERIC + sum(len(v) for v in VOCABULARIES)  # 123

# Constant divisor of the standardised row before clipping to the unit ball. 1 means: nearly every row
# (38 standardised numbers plus three ones, typical norm ≈ √41) is scaled onto the unit sphere, i.e. row
# normalisation. Chosen a priori for DP: output-perturbation noise η moves a score wᵀx by ηᵀx ∝ ‖x‖ while
# the signal wᵀx is fixed by the (norm-independent) decision, so rows as long as the bound allows give
# the best signal-to-noise. Checked on non-private pooled LR only (λ = 1e-4, one split): test accuracy
# 0.9198 for divisor 1, 0.9197 for √41 (15 % of rows clipped), 0.9197 for 2√41 — no loss.
ROW_SCALE = 1.0


def kdd_dir(data_dir: str | Path) -> Path:
    """The folder holding the KDD-99 files: ``data_dir`` itself or its ``kddcup99/`` subfolder."""
    base = Path(data_dir)
    return base / "kddcup99" if (base / "kddcup99").is_dir() else base


def kdd_file(data_dir: str | Path, name: str) -> Path:
    """Path of one KDD-99 file; DatasetError (mentioning --data) if it is missing."""
    p = kdd_dir(data_dir) / name
    if not p.is_file():
        raise DatasetError(f"KDD-99 file {p} not found; pass --data pointing at the folder holding kddcup99/ "
                           f"(or the kddcup99 folder itself, with {TRAIN_FILE}, {TEST_FILE}, {TYPES_FILE})")
    return p


def attack_categories(types_file: str | Path) -> dict[str, str]:
    """attack name → category (dos, u2r, r2l, probe) from training_attack_types.txt, plus normal → normal."""
    mapping = {"normal": "normal"}
    for line in Path(types_file).read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            mapping[parts[0]] = parts[1]
    if set(mapping.values()) != set(CATEGORIES):
        raise DatasetError(f"{types_file} does not map to the five categories {CATEGORIES}")
    return mapping


@dataclass(frozen=True)
class KddRaw:
    """One parsed KDD-99 file.

    ``numeric`` holds the 38 numeric columns as read (float64); ``symbolic`` the vocabulary index of
    protocol_type, service and flag (−1 = not in the vocabulary); ``label`` the label code into
    ``label_names`` (the label strings without the trailing period).
    """

    path: str
    numeric: np.ndarray  # (n, 38) float64
    symbolic: np.ndarray  # (n, 3) int16, −1 for out-of-vocabulary values
    label: np.ndarray  # (n,) int32 into label_names
    label_names: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.numeric.shape[0])

    def labels(self) -> np.ndarray:
        """The label strings (without the period), one per row."""
        return np.asarray(self.label_names, dtype=object)[self.label]


def _vocab_index(values: list[str], vocab: tuple[str, ...]) -> np.ndarray:
    uniq, inv = np.unique(np.asarray(values), return_inverse=True)
    pos = {v: i for i, v in enumerate(vocab)}
    lut = np.array([pos.get(str(u), -1) for u in uniq], dtype=np.int16)
    return lut[inv.ravel()]


def parse_kdd_file(path: str | Path) -> KddRaw:
    """Parse one (gzip-compressed or plain) KDD-99 file; not cached (see :func:`read_kdd_file`)."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"KDD-99 file {p} not found; pass --data pointing at the folder holding kddcup99/")
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rb") as fh:
        text = fh.read().decode("ascii")
    lines = text.splitlines()
    if not lines:
        raise DatasetError(f"{p} is empty")
    try:
        numeric = np.loadtxt(io.StringIO(text), delimiter=",", usecols=NUMERIC_COLUMNS, dtype=np.float64, ndmin=2)
    except ValueError as e:
        raise DatasetError(f"{p} is not KDD-99 text (42 comma-separated columns): {e}") from e
    heads = [ln.split(",", 4) for ln in lines]
    if any(len(h) < 5 for h in heads) or numeric.shape != (len(lines), N_NUMERIC):
        raise DatasetError(f"{p} has rows with fewer than 42 columns")
    symbolic = np.stack([_vocab_index([h[1 + k] for h in heads], VOCABULARIES[k]) for k in range(3)], axis=1)
    raw_labels = [ln[ln.rfind(",") + 1:].rstrip(".") for ln in lines]
    names, codes = np.unique(np.asarray(raw_labels), return_inverse=True)
    return KddRaw(str(p), numeric, symbolic, codes.ravel().astype(np.int32), tuple(str(n) for n in names))


@lru_cache(maxsize=2)
def read_kdd_file(path: str) -> KddRaw:
    """:func:`parse_kdd_file`, cached in-process (runs differ only in sampling). ``read_kdd_file.cache_clear()`` frees it."""
    return parse_kdd_file(path)


# -- labels ---------------------------------------------------------------------------------------
def binary_labels(raw: KddRaw) -> np.ndarray:
    """0 = normal, 1 = any attack (the paper's +1)."""
    normal = raw.label_names.index("normal") if "normal" in raw.label_names else -1
    return (raw.label != normal).astype(np.int64)


def category_labels(raw: KddRaw, mapping: dict[str, str]) -> np.ndarray:
    """Category index into :data:`CATEGORIES` per row; −1 for attacks the mapping does not know."""
    cat_index = {c: i for i, c in enumerate(CATEGORIES)}
    lut = np.array([cat_index[mapping[n]] if n in mapping else -1 for n in raw.label_names], dtype=np.int64)
    return lut[raw.label]


# -- features -------------------------------------------------------------------------------------
def log_numeric(numeric: np.ndarray) -> np.ndarray:
    """log1p(max(x, 0)) of the numeric columns (all KDD-99 numbers are ≥ 0; the max guards bad rows)."""
    return np.log1p(np.maximum(numeric, 0.0))


def one_hot(symbolic: np.ndarray) -> np.ndarray:
    """(n, 85) one-hot of protocol, service, flag; index −1 (unseen value) gives an all-zero block."""
    n = symbolic.shape[0]
    out = np.zeros((n, sum(len(v) for v in VOCABULARIES)))
    offset = 0
    rows = np.arange(n)
    for k, vocab in enumerate(VOCABULARIES):
        idx = symbolic[:, k].astype(np.int64)
        ok = idx >= 0
        out[rows[ok], offset + idx[ok]] = 1.0
        offset += len(vocab)
    return out


def clip_unit_ball(X: np.ndarray) -> np.ndarray:
    """Scale every row with ‖x‖ > 1 onto the unit sphere (rows inside are unchanged)."""
    norms = np.linalg.norm(X, axis=1)
    return X / np.maximum(1.0, norms)[:, None]


@dataclass(frozen=True)
class Standardizer:
    """Mean and s.d. of log1p(numeric) on a PUBLIC reference set (HCB16: the auxiliary rows)."""

    mean: np.ndarray  # (38,)
    scale: np.ndarray  # (38,), 1 where the reference s.d. is 0
    n_reference: int
    row_scale: float = ROW_SCALE

    @classmethod
    def fit(cls, raw: KddRaw, rows: np.ndarray, row_scale: float = ROW_SCALE) -> "Standardizer":
        """Statistics of ``raw`` restricted to ``rows`` (indices or a boolean mask) — only those rows are read."""
        L = log_numeric(raw.numeric[rows])
        if L.shape[0] < 2:
            raise ValueError("the reference set needs at least two rows")
        sd = L.std(axis=0)
        sd[sd == 0] = 1.0  # constant columns (num_outbound_cmds is always 0) stay 0 after centring
        return cls(L.mean(axis=0), sd, int(L.shape[0]), float(row_scale))

    def transform(self, raw: KddRaw, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """(n, 123) features with ‖x‖ ≤ 1 for ``raw``'s ``rows``."""
        z = (log_numeric(raw.numeric[rows]) - self.mean) / self.scale
        X = np.hstack([z, one_hot(raw.symbolic[rows])]) / self.row_scale
        return clip_unit_ball(X)


def feature_names() -> tuple[str, ...]:
    return (NUMERIC_NAMES + tuple(f"protocol_type={v}" for v in PROTOCOLS) + tuple(f"service={v}" for v in SERVICES)
            + tuple(f"flag={v}" for v in FLAGS))


@dataclass(frozen=True)
class KddTask:
    """The parsed training and test files with the labels of one task.

    task ``binary``: y ∈ {0 normal, 1 attack}, every row of both files.
    task ``multiclass``: y ∈ {0..4} = :data:`CATEGORIES` via training_attack_types.txt. Every
    training row has a category; test rows whose attack is not in the mapping (attack types that
    occur only in corrected.gz) are DROPPED: ``test_rows`` lists the rows kept.
    """

    task: str
    train: KddRaw
    test: KddRaw
    y_train: np.ndarray
    y_test: np.ndarray  # labels of test.rows[test_rows]
    test_rows: np.ndarray  # indices into ``test`` of the rows used
    class_names: tuple[str, ...]
    dropped_test_labels: dict[str, int]

    @property
    def classes(self) -> int:
        return len(self.class_names)


TASKS = ("binary", "multiclass")


def load_kdd_task(data_dir: str | Path, task: str = "binary") -> KddTask:
    """Parse (cached) both files and label them for ``task`` (see :class:`KddTask`)."""
    if task not in TASKS:
        raise ValueError(f"unknown KDD-99 task {task!r}; use one of {TASKS}")
    train_path, test_path = kdd_file(data_dir, TRAIN_FILE), kdd_file(data_dir, TEST_FILE)
    train, test = read_kdd_file(str(train_path)), read_kdd_file(str(test_path))
    if task == "binary":
        y_tr, y_te = binary_labels(train), binary_labels(test)
        return KddTask(task, train, test, y_tr, y_te, np.arange(len(test)), BINARY_CLASSES, {})
    mapping = attack_categories(kdd_file(data_dir, TYPES_FILE))
    y_tr = category_labels(train, mapping)
    if np.any(y_tr < 0):
        unknown = sorted({train.label_names[c] for c in np.unique(train.label[y_tr < 0])})
        raise DatasetError(f"{train.path} has labels without a category: {unknown}")
    y_te_all = category_labels(test, mapping)
    keep = np.flatnonzero(y_te_all >= 0)
    dropped_codes, dropped_counts = np.unique(test.label[y_te_all < 0], return_counts=True)
    dropped = {test.label_names[c]: int(k) for c, k in zip(dropped_codes, dropped_counts)}
    return KddTask(task, train, test, y_tr, y_te_all[keep], keep, CATEGORIES, dropped)


__all__ = (
    "BINARY_CLASSES", "CATEGORIES", "FLAGS", "KddRaw", "KddTask", "N_FEATURES", "PROTOCOLS", "ROW_SCALE", "SERVICES",
    "SERVICES_NOT_IN_FILES", "Standardizer", "TASKS", "attack_categories", "binary_labels", "category_labels",
    "clip_unit_ball", "feature_names", "kdd_dir", "kdd_file", "load_kdd_task", "log_numeric", "one_hot",
    "parse_kdd_file", "read_kdd_file",
)

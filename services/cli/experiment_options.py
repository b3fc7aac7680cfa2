"""The experiments' option defaults and choices as `--help` shows them, without importing the experiments.

The experiment modules (mpdp/experiments/) load the protocol cores, scipy and scikit-learn, seconds of imports;
`mpdp experiment NAME --help` needs only these values, so they are written here and
tests/core/test_cli_startup.py keeps each equal to the constant it copies (named beside it).
"""

from __future__ import annotations

# mpdp.experiments.pathak2010: PAPER_EPSILONS, PAPER_LAMBDA, PAPER_RUNS, SPLIT_NAMES
PATHAK_EPSILONS = (0.01, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4)
PATHAK_LAMBDA = 1.0
PATHAK_RUNS = 200
PATHAK_SPLITS = ("even", "15pct", "10pct")

# mpdp.lmgc.datasets.DATASETS; mpdp.experiments.lmgc: DEFAULT_EPSILONS, METHODS
LMGC_DATASETS = ("digits", "wine", "kdd99")
LMGC_EPSILONS = (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)
LMGC_METHODS = ("lmgc", "lmgc_corrected", "lmgc_paper", "logreg", "logreg_dp")

# mpdp.regression.config: UCI_DATASETS (its keys), UCI_DELTA, UCI_EPSILON_LABELS, UCI_GRID_REPEATS, UCI_REPEATS
UCI_DATASET_NAMES = ("abalone", "red", "white")
UCI_DELTA = 1e-4
UCI_EPSILON_LABELS = ("1", "1.78", "3.16", "5.62", "10", "31.62")
UCI_GRID_REPEATS = (20, 20)
UCI_REPEATS = 25

# mpdp.experiments.hamm2016.DEFAULT_PARTIES; mpdp.hamm2016.simulation: DEFAULT_EPSILONS_INV, LOCAL_CHOICES, METHODS;
# mpdp.hamm2016.pate: DEFAULT_QUERIES, DEFAULT_DELTA
HAMM_PARTIES = (5000, 10000, 20000)
HAMM_EPSILONS_INV = (0.0, 0.1, 1.0, 10.0, 100.0)
HAMM_LOCAL_CHOICES = ("logreg", "mixed", "sklearn_logreg", "linear_svm", "tree", "naive_bayes")
HAMM_METHODS = ("batch", "soft", "avg", "avg-tight", "pate", "vote", "indiv")
HAMM_PATE_QUERIES = 1000
HAMM_PATE_DELTA = 1e-6

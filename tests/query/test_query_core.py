"""DP queries, core: the compiler accepts the subset and refuses the rest (naming what is allowed); a party's vector
clamps to the public bounds and counts each row once in one group; the intervals cover the truth over repeated
noise; the role checks its release; the whole path in memory over the validated DCA."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpdp.data.dataset import DoesNotFit
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2, query_pb2
from mpdp.protocol import LocalProtocolError
from mpdp.query.evaluate import batch_vector, vector
from mpdp.query.plan import ALLOWED, MAX_DIMENSION, QUANTILE_BINS, QueryError, compile_query
from mpdp.query.release import _quantile, dca_params, decode, z_subgaussian
from mpdp.query.role import QueryRole, plan_of
from mpdp.schema import Schema

SCHEMA = Schema.model_validate({
    "mpdp_schema": 1, "version": 1, "name": "toy",
    "features": [
        {"name": "age", "type": "numeric", "bounds": [0, 100]},
        {"name": "stay", "type": "numeric", "bounds": [-10, 30]},
        {"name": "ward", "type": "categorical", "vocabulary": ["a", "b", "c"]},
        {"name": "sex", "type": "binary", "positive": "F", "negative": "M"},
    ],
    "label": {"column": "outcome", "positive": ["yes"], "negative": ["no"]},
})


def plan(sql: str):
    return compile_query(sql, SCHEMA, "toy")


# -- the compiler -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM toy",
    "SELECT COUNT(*) AS n, SUM(age), AVG(stay) FROM toy WHERE age >= 18 AND NOT ward = 'c' OR sex IN ('F') GROUP BY ward, BIN(age, 5)",
    "SELECT ward, QUANTILE(age, 0.9) AS p90, MEDIAN(stay) FROM toy GROUP BY ward",
    "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY age) AS med FROM toy WHERE age BETWEEN 20 AND 60 AND 30 < stay",
    "SELECT outcome, COUNT(*) FROM toy GROUP BY outcome",
])
def test_accepts_the_subset(sql):
    p = plan(sql)
    assert p.dimension >= 1 and p.sensitivity > 0


@pytest.mark.parametrize("sql, what", [
    ("SELECT SUM(salary) FROM toy", "not in the federation's schema"),
    ("SELECT COUNT(*) FROM toy WHERE income > 5", "not in the federation's schema"),
    ("SELECT COUNT(*) FROM toy GROUP BY age", "BIN(age, k)"),
    ("SELECT COUNT(*) FROM toy GROUP BY FLOOR(age / 10)", "never from the data"),
    ("SELECT COUNT(*) FROM toy GROUP BY NTILE(4) OVER (ORDER BY age)", "never from the data"),
    ("SELECT COUNT(*) FROM toy GROUP BY BIN(age, (SELECT MAX(age) FROM toy))", "literal"),
    ("SELECT COUNT(*) FROM toy WHERE age > (SELECT AVG(age) FROM toy)", "literal"),
    ("SELECT COUNT(*) FROM toy GROUP BY BIN(age, 1000)", "BIN's k"),
    ("SELECT age FROM toy", "not grouped by"),
    ("SELECT COUNT(age) FROM toy", "COUNT takes *"),
    ("SELECT COUNT(*) FROM toy ORDER BY 1", "ORDER"),
    ("SELECT COUNT(*) FROM toy LIMIT 3", "LIMIT"),
    ("SELECT COUNT(*) FROM other", "dataset"),
    ("SELECT COUNT(*) FROM toy JOIN toy t2 ON toy.age = t2.age", "JOINS"),
    ("DELETE FROM toy", "exactly one SELECT"),
    ("SELECT COUNT(*) FROM toy; SELECT COUNT(*) FROM toy", "exactly one SELECT"),
    ("SELECT MAX(age) FROM toy", "SELECT does not allow"),
    ("SELECT QUANTILE(age, 1.5) FROM toy", "strictly between 0 and 1"),
    ("SELECT SUM(ward) FROM toy", "numeric needed"),
    ("SELECT COUNT(*) FROM toy WHERE ward > 'a'", "= or <> only"),
    ("SELECT COUNT(*) FROM toy WHERE age = 'old'", "compare it with a number"),
    ("SELECT COUNT(*) FROM toy WHERE age LIKE '1%'", "WHERE does not allow"),
    ("SELECT COUNT(*) AS x, SUM(age) AS x FROM toy", "distinct aliases"),
    ("", "empty"),
    ("SELECT COUNT(*) FROM toy WHERE " + "(" * 2000 + "age > 1" + ")" * 2000, "nests too deeply"),
    ("SELECT COUNT(*) FROM toy WHERE " + "NOT " * 1500 + "age > 1", "nests too deeply"),
    ("SELECT COUNT(*) FROM toy WHERE " + " AND ".join(["age > 1"] * 2000), "longer than 8192"),
])
def test_refuses_everything_else_saying_what_is_allowed(sql, what):
    with pytest.raises(QueryError) as e:
        plan(sql)
    assert what in str(e.value) and ALLOWED in str(e.value)


def test_without_a_schema_only_count_star():
    assert compile_query("SELECT COUNT(*) AS n FROM bc", None, "bc").dimension == 1
    for sql in ("SELECT SUM(x) FROM bc", "SELECT COUNT(*) FROM bc WHERE x > 1", "SELECT COUNT(*) FROM bc GROUP BY BIN(x, 2)"):
        with pytest.raises(QueryError, match="no schema"):
            compile_query(sql, None, "bc")


def test_layout_sensitivity_and_split():
    p = plan("SELECT COUNT(*), AVG(stay), SUM(stay), MEDIAN(age), QUANTILE(age, 0.9) FROM toy GROUP BY ward, sex")
    G = 3 * 2
    assert p.cells == G
    assert [(x.kind, x.column, x.size) for x in p.parts] == [("count", "", G), ("sum", "stay", G), ("hist", "age", G * QUANTILE_BINS)]
    # a record moves ≤ 1 in two coordinates of count and hist (√2); stay ∈ [−10, 30] scaled by 30: range 4/3 < √2
    assert p.sensitivity == pytest.approx(math.sqrt(2 + 2 + 2))
    assert "ρ share 0.333" in p.split()
    signed = plan("SELECT SUM(stay) FROM toy")  # one group: the same record moves 40/30 ≤ √2
    assert signed.sensitivity == pytest.approx(math.sqrt(2))
    wide = compile_query("SELECT SUM(v) FROM t", Schema.model_validate({**SCHEMA.model_dump(), "features": [
        {"name": "v", "type": "numeric", "bounds": [-5, 5]}]}), "t")
    assert wide.sensitivity == pytest.approx(2.0)  # v from −5 to 5 in the same group: 10/5
    with pytest.raises(QueryError, match="at most"):
        plan("SELECT MEDIAN(age) FROM toy GROUP BY BIN(age, 100), BIN(stay, 100)")
    assert MAX_DIMENSION >= 4096


# -- a party's vector ---------------------------------------------------------------------------------------------
def cols(**kw):
    return {k: np.array(v, dtype=object) for k, v in kw.items()}


def test_party_vector_clamps_and_counts_each_row_once():
    p = plan("SELECT COUNT(*) AS n, SUM(stay), AVG(age) FROM toy WHERE ward <> 'c' GROUP BY sex")
    c = cols(age=["150", "-3", "40", "?", "20", "50"], stay=["100", "-50", "5", "1", "2", "3"], ward=["a", "b", "a", "a", "c", "zzz"],
             sex=["F", "M", "F", "F", "M", "F"], outcome=["yes"] * 6)
    z = batch_vector(p, c, 6, SCHEMA.missing_values)
    n, s_stay, s_age = z[0:2], z[2:4], z[4:6]
    # rows 0, 1, 2 count (row 3: age missing; row 4: ward c; row 5: ward not in the vocabulary)
    assert n.tolist() == [2.0, 1.0]  # F: rows 0, 2; M: row 1
    assert s_stay * 30 == pytest.approx([30 + 5, -10])  # 100 → 30 and −50 → −10 (the public bounds), scaled by B = 30
    assert s_age * 100 == pytest.approx([100 + 40, 0])  # 150 → 100, −3 → 0
    assert n.sum() <= 6 and all(abs(v) <= n.sum() for v in z)


def test_party_vector_groups_by_bins_and_label_and_the_row_bound():
    p = plan("SELECT COUNT(*) FROM toy GROUP BY BIN(age, 4), outcome")
    c = cols(age=["0", "24.9", "25", "100", "1000", "-1"], outcome=["yes", "no", "yes", "no", "yes", "maybe"])
    z = batch_vector(p, c, 6, SCHEMA.missing_values)
    # bins [0,25) [25,50) [50,75) [75,100]; clamped 1000 → 100 (last bin); "maybe" is no category: excluded
    want = np.zeros((4, 2))
    want[0, 0] += 1  # 0 yes
    want[0, 1] += 1  # 24.9 no
    want[1, 0] += 1  # 25 yes
    want[3, 1] += 1  # 100 no
    want[3, 0] += 1  # 1000 yes
    assert z.tolist() == want.ravel().tolist()
    batches = iter([(c, 6), (c, 6)])
    assert vector(p, iter([(c, 6)]), 6).sum() == 5
    with pytest.raises(DoesNotFit):
        vector(p, batches, 11)


def test_party_vector_quantile_histogram():
    p = plan("SELECT MEDIAN(age) FROM toy")
    z = batch_vector(p, cols(age=[str(v) for v in range(0, 100)]), 100)
    assert z.sum() == 100 and z.size == QUANTILE_BINS and z.max() - z.min() <= 1


# -- intervals ----------------------------------------------------------------------------------------------------
def test_count_and_sum_intervals_cover_under_repeated_noise():
    """The sub-Gaussian interval covers the true value in ≥ 95 % of draws (it is conservative: ≈ 99 % for Gaussian noise)."""
    p = plan("SELECT COUNT(*) AS n, SUM(stay) AS s FROM toy GROUP BY ward")
    g = np.random.default_rng(7)
    truth = np.array([120.0, 40.0, 3.0, 50.0, -2.0, 0.5])
    V = 9.0 ** 2
    hits = np.zeros(2)
    runs = 2000
    for _ in range(runs):
        y = truth + g.normal(0, math.sqrt(V), size=truth.size)
        rows = decode(p, y, V, 3, 16)
        for a in range(2):
            for gi, (_, cells) in enumerate(rows):
                t = truth[gi] if a == 0 else truth[3 + gi] * 30
                hits[a] += cells[a].low <= t <= cells[a].high
    cover = hits / (3 * runs)
    assert (cover >= 0.95).all(), cover
    assert z_subgaussian(0.05) == pytest.approx(math.sqrt(2 * math.log(40)))


def test_average_and_quantile_intervals_cover_under_repeated_noise():
    p = plan("SELECT AVG(age) AS m, QUANTILE(age, 0.25) AS q FROM toy")
    g = np.random.default_rng(11)
    ages = np.clip(g.normal(45, 15, size=400), 0, 100)
    count, s = len(ages), ages.sum() / 100
    hist = np.bincount(np.minimum(np.floor(ages / 100 * QUANTILE_BINS).astype(int), QUANTILE_BINS - 1), minlength=QUANTILE_BINS)
    srt = np.sort(ages)
    true_q = srt[math.ceil(0.25 * count) - 1]  # smallest value with at least q·N values at or below it
    truth = np.concatenate([[count], [s], hist]).astype(float)
    V = 6.0 ** 2
    hit_m = hit_q = 0
    runs = 1000
    for _ in range(runs):
        y = truth + g.normal(0, math.sqrt(V), size=truth.size)
        (_, (m, q)), = decode(p, y, V, 3, 16)
        hit_m += m.low <= ages.mean() <= m.high
        hit_q += q.low <= true_q <= q.high
        assert 0 <= m.low <= m.high <= 100 and 0 <= q.low <= q.high <= 100
    assert hit_m / runs >= 0.95 and hit_q / runs >= 0.95, (hit_m, hit_q)


def test_quantile_estimate_without_noise_interpolates_in_its_bin():
    edges = [float(v) for v in range(0, 5)]  # 4 bins of width 1
    cell = _quantile(np.array([10.0, 10.0, 10.0, 10.0]), 0.5, edges, 0.0, 0.0, 0.05, 0.0)
    assert cell.estimate == pytest.approx(2.0)
    assert cell.low <= 2.0 <= cell.high and cell.high - cell.low <= 2.0


# -- the job --------------------------------------------------------------------------------------------------------
def spec(sql: str, schema=SCHEMA) -> query_pb2.QueryJobSpec:
    return query_pb2.QueryJobSpec(sql=sql, schema_json=schema.canonical().decode() if schema is not None else "", epsilon=1.0, delta=1e-6)


def test_role_refuses_a_query_or_schema_before_any_job():
    parties, nodes = ["p1", "p2", "p3"], ["n1", "n2"]
    with pytest.raises(LocalProtocolError, match="not in the federation's schema"):
        QueryRole(spec("SELECT SUM(salary) FROM toy"), "toy", SCHEMA.sha256(), parties, nodes, 100)
    with pytest.raises(LocalProtocolError, match="does not hash"):
        QueryRole(spec("SELECT COUNT(*) FROM toy"), "toy", "0" * 64, parties, nodes, 100)
    with pytest.raises(ValueError, match="carries no schema"):
        plan_of(spec("SELECT COUNT(*) FROM toy", None), "toy", SCHEMA.sha256())


def test_role_releases_a_checked_table():
    s = spec("SELECT ward, COUNT(*) AS n FROM toy GROUP BY ward")
    role = QueryRole(s, "toy", SCHEMA.sha256(), ["p1", "p2", "p3"], ["n1", "n2"], 100, job_id="qy-000000000001")
    (ask,) = role.start()
    p = ask.params
    assert (p.validate, p.noise, p.clip_bounds, p.dimension) == ("range", "discrete-gaussian", (100.0,), 3)
    bad = dca_pb2.DpSum(job_id="dca-1", values=[1.0] * 2, dimension=2, epsilon=1.0, delta=1e-6, sensitivity=p.sensitivity)
    with pytest.raises(LocalProtocolError, match="not this query's"):
        role.released("dca-1", bad)
    assert role.state == "FAILED"  # a wrong release fails the job closed
    role = QueryRole(s, "toy", SCHEMA.sha256(), ["p1", "p2", "p3"], ["n1", "n2"], 100, job_id="qy-000000000001")
    role.start()
    ok = dca_pb2.DpSum(job_id="dca-1", values=[10.0, 20.0, 30.0], dimension=3, epsilon=1.0, delta=1e-6, sensitivity=p.sensitivity,
                       noise_variance=4.0, clients_included=3, fractional_bits=p.frac_bits)
    (pub,) = role.released("dca-1", ok)
    msg = pub.release.message("qy-000000000001", ["p1", "p2", "p3"])
    assert [r.groups[0] for r in msg.query.rows] == ["a", "b", "c"]
    assert [r.cells[0].estimate for r in msg.query.rows] == [10.0, 20.0, 30.0]
    assert "each party is charged once" in msg.guarantee.statement


@pytest.mark.slow
def test_in_memory_over_the_validated_dca_interval_holds_the_truth():
    """Three parties' vectors through the real validated DCA (proofs, discrete Gaussian), decoded to the table."""
    from mpdp.dca.driver import run_job

    p = plan("SELECT ward, COUNT(*) AS n, AVG(age) AS m FROM toy GROUP BY ward")
    g = np.random.default_rng(3)
    parts, truth_n, truth_s = [], np.zeros(3), np.zeros(3)
    for k in range(3):
        n = 60 + 10 * k
        ward = g.choice(["a", "b", "c"], size=n)
        age = g.uniform(0, 100, size=n)
        parts.append(batch_vector(p, cols(age=[f"{a:.3f}" for a in age], ward=list(ward)), n))
        for j, w in enumerate("abc"):
            truth_n[j] += (ward == w).sum()
            truth_s[j] += np.round(age, 3)[ward == w].sum()
    params = dca_params(p, "dca-q", ["p1", "p2", "p3"], ["n1", "n2"], epsilon=1.0, delta=1e-6, records_per_party=100)
    run = run_job(params, np.stack(parts), Drbg.from_os(), client_ids=["p1", "p2", "p3"], record=False)
    rel = run.release
    assert rel is not None and rel.clients_included == 3
    # at α = 10⁻⁹ the six cells' intervals all hold with probability ≥ 1 − 6·10⁻⁹ (coverage itself is tested above)
    rows = decode(p, list(rel.values), rel.noise_variance, rel.clients_included, rel.fractional_bits, alpha=1e-9)
    for j, (key, (n, m)) in enumerate(rows):
        assert key == ("abc"[j],)
        assert n.low <= truth_n[j] <= n.high
        assert m.low <= truth_s[j] / truth_n[j] <= m.high


def test_a_batch_canonicalises_every_cell_as_the_schema_does():
    """Each distinct text cell is canonicalised once per batch; the result is _canon's, cell by cell, for text, numbers,
    None and look-alikes (True and 1, a trailing NUL, a number's spellings)."""
    from mpdp.query.evaluate import _canon_all
    from mpdp.schema import _canon

    cells = np.array([" Male", "Female ", "1.0", "+1", None, "", "nan", " x\x1c", 3, 2.5, "é ", "Male\x00", True, 1, float("nan"), " Male"], dtype=object)
    assert list(_canon_all(cells)) == [_canon(v) for v in cells]
    text = np.array([" Male", "Female ", "1.0", "+1", "", "nan", " x\x1c", "é ", "Male\x00", " Male", "Male"], dtype=object)  # str cells only
    assert list(_canon_all(text)) == [_canon(v) for v in text]
    assert list(_canon_all(np.array([1.0, np.nan, 2.5]))) == ["1", "", "2.5"]
    assert len(_canon_all(np.array([], dtype=object))) == 0

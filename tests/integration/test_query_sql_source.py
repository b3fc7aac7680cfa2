"""A DP query's party vector over a PostgreSQL table (read in batches through the SQL source, only the query's
columns) equals the vector over a CSV file of the same rows; NULL cells exclude their rows like missing ones."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.query.evaluate import dataset_vector
from mpdp.query.plan import compile_query
from mpdp.schema import Schema
from tests.integration.test_sql_source import SCHEMA, _csv, _ds, _rows, pg  # noqa: F401  (pg: the server fixture)

pytestmark = pytest.mark.integration
SQL = ("SELECT region, outcome, COUNT(*) AS n, SUM(amount) AS s, MEDIAN(age) AS med FROM claims "
       "WHERE smoker = 'yes' OR age > 40 GROUP BY region, outcome, BIN(age, 3)")


def test_a_tables_query_vector_equals_the_csvs(tmp_path, pg):  # noqa: F811
    sql_ds = _ds(tmp_path, pg)
    plan = compile_query(SQL, Schema.load(sql_ds.schema_file), "claims")
    from_sql = dataset_vector(sql_ds, "claims", plan, 3000)
    from_csv = dataset_vector(_csv(tmp_path, _rows()), "claims", plan, 3000)
    assert from_sql.shape == (plan.dimension,) and from_sql.sum() > 0
    assert np.allclose(from_sql, from_csv, rtol=0, atol=1e-9)
    holes = dataset_vector(_ds(tmp_path, pg, table="holes"), "claims", plan, 3000)
    count = plan.part("count")
    assert holes[count.offset:count.offset + count.size].sum() < from_sql[count.offset:count.offset + count.size].sum()  # NULL ages excluded
    with pytest.raises(ValueError, match="records_per_party"):
        dataset_vector(sql_ds, "claims", plan, 2999)
    assert SCHEMA  # the table's schema is the SQL-source test's


def test_the_database_aggregates_when_it_compares_as_the_batches_do(tmp_path, pg):  # noqa: F811
    """A pushed-down query returns the batch path's vector; a query whose categories are spelled as numbers is not
    pushed down (SQL would compare their text) and is read in batches instead."""
    from mpdp.data.dataset import source_of
    from mpdp.query import pushdown
    from mpdp.query.evaluate import vector

    sql_ds = _ds(tmp_path, pg)
    schema = Schema.load(sql_ds.schema_file)
    plan = compile_query(SQL + "", schema, "claims")
    source = source_of(sql_ds, schema)
    pushed = pushdown.vector(plan, source, schema, 3000)
    assert pushed is not None
    batched = vector(plan, ((b.columns, b.good) for b in source.batches(700, sorted(plan.columns))), 3000, schema.missing_values)
    assert np.allclose(pushed, batched, rtol=0, atol=1e-9)
    numbered = compile_query("SELECT COUNT(*) FROM claims WHERE region = '1.0'", schema, "claims")
    assert pushdown.vector(numbered, source, schema, 3000) is None
    with pytest.raises(ValueError, match="records_per_party"):
        pushdown.vector(plan, source, schema, 10)

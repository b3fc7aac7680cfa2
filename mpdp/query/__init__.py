"""DP analytics across the parties (docs/protocols/query.md): a SQL subset — COUNT, SUM, AVG and quantiles, with
WHERE on public predicates and GROUP BY the schema's categories or bins — answered by one validated DCA sum with the
distributed discrete Gaussian, every cell with a 95 % interval and its noise scale.

:mod:`mpdp.query.plan` compiles a query (refusing anything else); :mod:`mpdp.query.evaluate` is a party's vector;
:mod:`mpdp.query.release` the DCA job and the intervals; :mod:`mpdp.query.role` the curator's one-round role."""

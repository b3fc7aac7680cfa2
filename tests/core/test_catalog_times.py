"""A restarted curator lists the jobs of its earlier run with the times they really took: the catalog keeps each
job's admission and end times on disk as the job ends (services/curator/catalog.py), and reads them back for the
jobs it only knows from a store."""

from __future__ import annotations

from mpdp.messages import common_pb2
from mpdp_services.common import jobs
from mpdp_services.curator import catalog as catalogs
from tests.core.test_jobs import Job, outcome, table

P = common_pb2


def _catalog(tmp_path, stored=()):
    tab, clock = table()
    source = catalogs.Source("test", tab, lambda j: True, lambda: list(stored))
    return catalogs.Catalog([source], times_dir=tmp_path / "job-times"), tab, clock


def test_a_job_of_an_earlier_run_keeps_its_duration(tmp_path):
    cat, tab, clock = _catalog(tmp_path)
    job = Job()
    tab.admit("pk-1", job, 60)
    clock.now += 12.5
    job.state, job.terminal = "PUBLISHED", True
    tab.observe("pk-1")
    live = cat.job("pk-1")
    assert live is not None and abs((live.ended_unix - live.created_unix) - 12.5) < 1e-6

    # the curator restarts: new tables, the job known only from its store (file time: when it was written)
    again, _, _ = _catalog(tmp_path, stored=[("pk-1", "PUBLISHED", live.ended_unix + 1.0)])
    old = again.job("pk-1")
    assert old is not None and old.terminal and old.state == "PUBLISHED"
    assert (old.created_unix, old.ended_unix) == (live.created_unix, live.ended_unix)
    assert [s.job_id for s in again.jobs()] == ["pk-1"] and again.jobs()[0].ended_unix - again.jobs()[0].created_unix > 12


def test_without_kept_times_a_stored_job_has_its_file_time_and_no_made_up_duration(tmp_path):
    cat, _, _ = _catalog(tmp_path, stored=[("pk-2", "PUBLISHED", 1_700_000_000.0)])
    old = cat.job("pk-2")
    assert old is not None and old.created_unix == old.ended_unix == 1_700_000_000.0
    (tmp_path / "job-times").mkdir()
    (tmp_path / "job-times" / "pk-2.json").write_text('{"created": "x"}')  # unreadable: as if none
    assert cat.job("pk-2").created_unix == 1_700_000_000.0


def test_a_failing_end_hook_never_changes_the_job(tmp_path):
    tab, _ = table()
    tab.on_end.append(lambda record: 1 / 0)
    job = Job()
    tab.admit("pk-3", job, 60)
    job.state, job.terminal, job.problem = "FAILED", True, P.JOB_FAILED
    tab.observe("pk-3")
    rec = tab.record("pk-3")
    assert rec is not None and rec.terminal and rec.state == "FAILED" and rec.problem == P.JOB_FAILED
    assert outcome(job) == ("FAILED", True, P.JOB_FAILED) and isinstance(rec, jobs.JobRecord)

"""`--log-format json`: one JSON object per line with the role, the site and, inside a job's step, the job."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from mpdp_services.common import logs


@pytest.fixture
def captured():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter("party", "party-2"))
    log = logging.getLogger("mpdp.test.logs")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield log, stream
    log.removeHandler(handler)


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_outside_a_job(captured):
    log, stream = captured
    log.warning("refused %s", "x")
    (line,) = _lines(stream)
    assert line["level"] == "WARNING" and line["role"] == "party" and line["site"] == "party-2" and line["event"] == "refused x"
    assert line["time"].endswith("Z") and "job_id" not in line


def test_job_fields_come_from_the_task_context_or_extra(captured):
    log, stream = captured

    async def step(job: str) -> None:
        logs.in_job(job, "pathak2010", "STAGE2")
        await asyncio.sleep(0)
        log.info("took a message")

    async def both() -> None:
        await asyncio.gather(step("pk-aaaaaaaaaaaa"), step("pk-bbbbbbbbbbbb"))  # each task keeps its own job

    asyncio.run(both())
    log.info("explicit", extra={"job_id": "dca-cccccccccccc", "protocol": "dca", "stage": "RELEASED"})
    lines = _lines(stream)
    assert sorted(line["job_id"] for line in lines[:2]) == ["pk-aaaaaaaaaaaa", "pk-bbbbbbbbbbbb"]
    assert all(line["protocol"] == "pathak2010" and line["stage"] == "STAGE2" for line in lines[:2])
    assert lines[2]["job_id"] == "dca-cccccccccccc" and lines[2]["stage"] == "RELEASED"


def test_exceptions_stay_inside_one_line(captured):
    log, stream = captured
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    (line,) = _lines(stream)
    assert "RuntimeError: boom" in line["exception"]


def test_setup_refuses_unknown_formats():
    with pytest.raises(ValueError, match="log format"):
        logs.setup("xml", True, "curator", "curator")

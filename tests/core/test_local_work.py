"""The pad on a party's local work (services/party/local_work.py), on an injected clock: its deadline is fixed when the
work begins, done() returns no earlier than it whatever the work took, and an overrun is logged at the party."""

from __future__ import annotations

import asyncio
import logging

import pytest

from mpdp_services.party import local_work
from mpdp_services.party.local_work import LocalWork


class Clock:
    """A fake monotonic clock; asyncio.sleep in the module under test advances it instead of waiting."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(local_work.asyncio, "sleep", c.sleep)
    return c


@pytest.mark.parametrize("work", [0.0, 0.3, 2.9])
def test_done_returns_at_the_deadline_whatever_the_work_took(clock, work):
    pad = LocalWork(3.0, "job-a", "the work", clock=clock)
    clock.now += work  # the work on the records
    took = asyncio.run(pad.done())
    assert took == pytest.approx(work)
    assert clock.now == pytest.approx(103.0)  # the same instant for every work length
    assert sum(clock.slept) == pytest.approx(3.0 - work)


def test_an_overrun_is_not_waited_for_and_is_logged_at_the_party(clock, caplog):
    pad = LocalWork(3.0, "job-b", "the local work for its shares", clock=clock)
    clock.now += 4.5
    with caplog.at_level(logging.WARNING, logger="mpdp.party"):
        took = asyncio.run(pad.done())
    assert took == pytest.approx(4.5) and clock.slept == [] and clock.now == pytest.approx(104.5)
    assert "job-b" in caplog.text and "over local_work_seconds = 3.000 s" in caplog.text


def test_no_pad_waits_for_nothing_and_warns_of_nothing(clock, caplog):
    pad = LocalWork(0.0, "job-c", "the work", clock=clock)
    clock.now += 1.0
    with caplog.at_level(logging.WARNING, logger="mpdp.party"):
        asyncio.run(pad.done())
    assert clock.slept == [] and not caplog.text


@pytest.mark.parametrize("seconds", [-1.0, float("nan")])
def test_a_negative_or_missing_pad_is_refused(seconds):
    with pytest.raises(ValueError):
        LocalWork(seconds, "job-d", "the work")

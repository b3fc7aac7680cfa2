"""Traces of jobs (services/common/tracing.py), in one process with the SDK's in-memory exporter.

Two toy role machines hosted by the real runtime (services/common/runtime.py ``Hosted``) talk through route
callbacks that carry the trace context the way gRPC metadata does (``tracing.outgoing`` on the sender,
``tracing.incoming`` at the receiver's gate): each role's job span has one stage span per state, the worker's job
span is a child of the coordinator's stage span that announced the job, and the whole job is one trace. With traces
off nothing is recorded and the runtime's calls are no-ops; spans carry only value-free attributes."""

from __future__ import annotations

import asyncio
import json

import pytest

from mpdp.messages import common_pb2
from mpdp.protocol import Machine, Peer, Send, row
from mpdp_services.common import tracing
from mpdp_services.common.runtime import Hosted

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

BOSS = Peer("curator", "boss")
WORKER = Peer("party", "worker")


class Boss(Machine):
    """Announces the job (JobRef) to the worker, then waits for its Ack-like answer (a JobRef back)."""

    __module__ = "mpdp.toy.boss"  # Hosted names the protocol from the module: "toy"
    ROLE = "curator"
    STATES = ("START", "AWAIT_ANSWER", "DONE", "FAILED")
    TERMINAL = ("DONE", "FAILED")
    TABLE = (row("START", "start", "self", "AWAIT_ANSWER"), row("AWAIT_ANSWER", "JobRef", "party", "DONE"))
    PARTICIPANTS = frozenset({"party"})

    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset({"party"}) if sender == WORKER else frozenset()

    def start(self):
        return self._local("start")

    def _on_start(self):
        return [Send(WORKER, common_pb2.JobRef(job_id=self.job_id))]

    def _on_JobRef(self, sender, message):
        return []


class Worker(Machine):
    __module__ = "mpdp.toy.worker"
    ROLE = "party"
    STATES = ("AWAIT_ANNOUNCEMENT", "WORKING", "DONE", "FAILED")
    TERMINAL = ("DONE", "FAILED")
    TABLE = (row("AWAIT_ANNOUNCEMENT", "JobRef", "curator", "WORKING"), row("WORKING", "finish", "self", "DONE"))
    PARTICIPANTS = frozenset({"curator"})

    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset({"curator"}) if sender == BOSS else frozenset()

    def _on_JobRef(self, sender, message):
        return []

    def finish(self):
        return self._local("finish")

    def _on_finish(self):
        return [Send(BOSS, common_pb2.JobRef(job_id=self.job_id))]


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.configure("test", "site-a", [SimpleSpanProcessor(exporter)])
    yield exporter
    tracing.shutdown()


def _run_job(job_id: str = "toy-1") -> tuple[Hosted, Hosted]:
    """The boss starts the job; its announcement creates the worker's job (as a servicer would, inside the
    gate's ``incoming``); the worker finishes and answers; both reach DONE."""
    hosted: dict[str, Hosted] = {}

    async def main():
        async def boss_route(h, outputs):
            for o in outputs:
                md = tracing.outgoing()  # what PeerChannels.call puts in the call's metadata
                with tracing.incoming(md):  # what the receiver's RoleInterceptor does
                    w = Hosted(Worker(job_id, WORKER), worker_route)
                    hosted["worker"] = w
                    await w.deliver(BOSS, o.message, inline=True)

        async def worker_route(h, outputs):
            for o in outputs:
                with tracing.incoming(tracing.outgoing()):
                    await hosted["boss"].deliver(WORKER, o.message, inline=True)

        boss = Hosted(Boss(job_id, BOSS), boss_route)
        hosted["boss"] = boss
        await boss.start(boss.machine.start())
        await hosted["worker"].local(hosted["worker"].machine.finish)

    asyncio.run(main())
    return hosted["boss"], hosted["worker"]


def _by_role(finished):
    out: dict[str, list] = {}
    for s in finished:
        out.setdefault(s.attributes["mpdp.role"], []).append(s)
    return out


def test_a_span_per_state_under_one_job_span_per_role_in_one_trace(spans):
    boss, worker = _run_job()
    assert boss.machine.state == worker.machine.state == "DONE"
    finished = spans.get_finished_spans()
    assert len({s.context.trace_id for s in finished}) == 1  # one trace for the whole job
    roles = _by_role(finished)
    assert set(roles) == {"curator", "party"}
    for role, states in (("curator", ["START", "AWAIT_ANSWER"]), ("party", ["AWAIT_ANNOUNCEMENT", "WORKING"])):
        mine = roles[role]
        [job] = [s for s in mine if s.name == "toy job"]
        assert job.attributes["mpdp.state"] == "DONE" and job.attributes["mpdp.job_id"] == "toy-1" and job.attributes["mpdp.protocol"] == "toy"
        stages = sorted((s for s in mine if s is not job), key=lambda s: s.start_time)
        assert [s.attributes["mpdp.state"] for s in stages] == states
        assert all(s.parent.span_id == job.context.span_id for s in stages)  # stages are children of the role's job span
        assert all(s.start_time >= job.start_time and s.end_time <= job.end_time for s in stages)
    [boss_job] = [s for s in roles["curator"] if s.name == "toy job"]
    [worker_job] = [s for s in roles["party"] if s.name == "toy job"]
    assert boss_job.parent is None  # the curator's job span is the trace's root
    announcing = next(s for s in roles["curator"] if s.attributes.get("mpdp.state") == "AWAIT_ANSWER")
    assert worker_job.parent.span_id == announcing.context.span_id and worker_job.parent.is_remote  # joined through the metadata
    assert worker_job.resource.attributes["mpdp.site"] == "site-a" and worker_job.resource.attributes["service.name"] == "mpdp-test"
    # the parent links form one tree: every parent is a span of the trace
    ids = {s.context.span_id for s in finished}
    assert all(s.parent is None or s.parent.span_id in ids for s in finished)


def test_spans_carry_value_free_attributes_only(spans):
    _run_job()
    allowed = {"mpdp.job_id", "mpdp.protocol", "mpdp.role", "mpdp.site", "mpdp.state", "mpdp.stage", "mpdp.problem"}
    for s in spans.get_finished_spans():
        assert set(s.attributes) <= allowed, s.attributes


def test_a_failed_job_ends_its_spans_with_the_problem(spans):
    async def main():
        async def route(h, outputs):
            pass

        w = Hosted(Worker("toy-2", WORKER), route)
        await w.deliver(BOSS, common_pb2.JobRef(job_id="toy-2"), inline=True)
        await w.fail(common_pb2.PEER_UNREACHABLE, "the boss is gone")
        return w

    w = asyncio.run(main())
    assert w.machine.failed
    [job] = [s for s in spans.get_finished_spans() if s.name == "toy job"]
    assert job.attributes["mpdp.state"] == "FAILED" and job.attributes["mpdp.problem"] == "PEER_UNREACHABLE"
    assert job.status.status_code.name == "ERROR"
    assert "the boss is gone" not in json.dumps(dict(job.attributes))  # a failure's detail stays in the log


def test_off_records_nothing_and_sends_no_metadata():
    tracing.shutdown()
    assert not tracing.enabled()
    assert tracing.outgoing() is None and tracing.extract([("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01")]) is None
    assert tracing.job("j", "toy", "party") is tracing.NO_TRACE
    boss, worker = _run_job("toy-3")  # the runtime runs unchanged
    assert boss.trace is tracing.NO_TRACE and worker.machine.state == "DONE"
    with tracing.job_span("j", "toy", "party"):
        pass


def test_settings():
    assert tracing.parse("") == [] and tracing.parse("off") == [] and tracing.parse(None) == []
    assert tracing.parse("console, file:/tmp/x/{site}.jsonl") == ["console", "file:/tmp/x/{site}.jsonl"]
    with pytest.raises(ValueError, match="unknown exporter"):
        tracing.parse("jaeger")
    assert tracing.setup("off", "party", "p") is False and not tracing.enabled()


def test_the_file_exporter_writes_one_json_object_per_span(tmp_path):
    try:
        assert tracing.setup(f"file:{tmp_path}/{{role}}-{{site}}.jsonl", "curator", "cur")
        with tracing.job_span("toy-4", "toy", "curator"):
            md = tracing.outgoing()
        assert md is not None and md[0][0] == "traceparent"
    finally:
        tracing.shutdown()
    [line] = (tmp_path / "curator-cur.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert rec["name"] == "toy job" and rec["parent_id"] is None and len(rec["trace_id"]) == 32
    assert rec["attributes"] == {"mpdp.job_id": "toy-4", "mpdp.protocol": "toy", "mpdp.role": "curator", "mpdp.site": "cur"}
    assert rec["resource"]["mpdp.role"] == "curator" and rec["resource"]["mpdp.site"] == "cur" and rec["end"] >= rec["start"]
    assert md[0][1].split("-")[1] == rec["trace_id"] and md[0][1].split("-")[2] == rec["span_id"]


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_the_api_alone_is_enough_while_traces_are_off():
    """Without the SDK (a fresh interpreter that cannot import opentelemetry.sdk): the runtime imports and runs its
    no-ops; turning traces on says which package to install."""
    import subprocess
    import sys

    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry.sdk" or name.startswith("opentelemetry.sdk."):
            raise ImportError("no SDK here")
sys.meta_path.insert(0, Block())
from mpdp_services.common import runtime, tracing, rpc
assert tracing.JsonLinesExporter is None and not tracing.enabled()
assert tracing.job("j", "p", "r") is tracing.NO_TRACE and tracing.outgoing() is None
with tracing.incoming([("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01")]), tracing.job_span("j", "p", "r") as s:
    s.done("DONE")
assert tracing.setup("off", "party", "p") is False
try:
    tracing.setup("file:/tmp/x.jsonl", "party", "p")
except ValueError as e:
    assert "mpdp[traces]" in str(e), e
else:
    raise AssertionError("no error without the SDK")
print("api-only ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "api-only ok" in r.stdout, r.stderr[-2000:]


def test_the_standard_otel_variables_are_honoured():
    assert tracing.exporters("off", {}) == []
    assert tracing.exporters("off", {"OTEL_TRACES_EXPORTER": "otlp"}) == ["otlp"]
    assert tracing.exporters("file:/tmp/x.jsonl", {"OTEL_TRACES_EXPORTER": "console,none"}) == ["file:/tmp/x.jsonl", "console"]
    assert tracing.exporters("console", {"OTEL_TRACES_EXPORTER": "console"}) == ["console"]
    assert tracing.exporters("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}) == ["otlp"]
    assert tracing.exporters("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}) == []
    assert tracing.exporters("console", {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}) == []
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER: unknown exporter 'zipkin'"):
        tracing.exporters("", {"OTEL_TRACES_EXPORTER": "zipkin"})


def test_otel_service_name_names_the_service_and_mpdp_traces_warns(monkeypatch, caplog, tmp_path):
    pytest.importorskip("opentelemetry.sdk")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "hospital-a-party")
    provider = tracing.configure("party", "p", [])
    try:
        assert provider.resource.attributes["service.name"] == "hospital-a-party"
        assert provider.resource.attributes["mpdp.site"] == "p"
    finally:
        tracing.shutdown()
    monkeypatch.setenv("MPDP_TRACES", f"file:{tmp_path}/x.jsonl")
    with caplog.at_level("WARNING", logger="mpdp.tracing"):
        assert tracing.setup(f"file:{tmp_path}/x.jsonl", "party", "p")
    tracing.shutdown()
    assert any("MPDP_TRACES is deprecated" in r.getMessage() for r in caplog.records)

"""Traces of jobs (OpenTelemetry): one trace per job, a span per stage at every role, joined across processes.

What a trace holds. At each role a job has a **job span** (``<protocol> job``) and, as its children, one **stage
span** per state the job's machine was in at that role (``<protocol> <STATE>``: opened when the machine enters
the state, ended when it leaves it; the terminal state ends the job span). The curator creates the job's trace
when it creates the job; every call a role makes to another role carries the current span as a W3C
``traceparent`` in the gRPC metadata (:func:`outgoing`, used by :class:`~mpdp_services.common.rpc.PeerChannels`),
and the receiving role's gate (:class:`~mpdp_services.common.rpc.RoleInterceptor`) makes it the current context
while the call is served (:func:`incoming`). A party or compute node learns of a job from the curator's first
message, so its job span is a child of the curator's span that sent it: the spans of all roles form one tree.

Spans carry value-free attributes only: ``mpdp.job_id``, ``mpdp.protocol``, ``mpdp.role``, ``mpdp.state``,
``mpdp.stage``, ``mpdp.problem`` (a Problem's name), and the process's resource names its role and site. Never
data, dataset sizes, keys, shares or other values (docs/protocols/job-model.md: what roles must not reveal).

Turning traces on. The package depends on ``opentelemetry-api`` only; without the SDK (extra ``mpdp[traces]``)
or with traces off (the default) every function here is a no-op costing one attribute test. A role process
calls :func:`setup` at start-up with its config's ``traces`` field; the standard OpenTelemetry variables are
honoured too (:func:`exporters`):

- ``OTEL_TRACES_EXPORTER``: ``otlp``, ``console`` or ``none`` (comma-separated), added to the config's exporters;
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) alone turns ``otlp`` on; the exporter reads it and
  ``OTEL_EXPORTER_OTLP_HEADERS``; ``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`` picks the HTTP exporter;
- ``OTEL_SERVICE_NAME`` replaces the service name (default ``mpdp-<role>``), ``OTEL_RESOURCE_ATTRIBUTES`` adds
  resource attributes; ``OTEL_SDK_DISABLED=true`` turns traces off whatever else says.

``MPDP_TRACES`` (the config field's environment override) still works and is deprecated: it goes in the next
release (``OTEL_TRACES_EXPORTER`` for otlp and console, the config's ``traces`` for files). The ``traces`` values,
comma-separated:

- ``off`` or empty: no traces (the default);
- ``console``: each finished span as JSON on stderr;
- ``file:PATH``: each finished span appended as one JSON object per line to PATH (``{role}``, ``{site}`` and
  ``{pid}`` in PATH are replaced), written when the span ends (:class:`JsonLinesExporter`);
- ``otlp``: batches to an OpenTelemetry collector (needs ``opentelemetry-exporter-otlp``; endpoint and headers
  from the standard ``OTEL_EXPORTER_OTLP_*`` variables).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from typing import Any, Iterator, Sequence

from opentelemetry import context as otel_context, trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("mpdp.tracing")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_PROPAGATOR = TraceContextTextMapPropagator()  # W3C trace context only: never baggage (it could carry values)


class _State:
    tracer: trace.Tracer | None = None  # None: traces are off (every function below returns at once)
    provider: Any = None  # the SDK TracerProvider this module installed, for shutdown()
    role = ""
    site = ""


_S = _State()


def enabled() -> bool:
    return _S.tracer is not None


# -- configuration ------------------------------------------------------------------------------------------
def parse(spec: str | None) -> list[str]:
    """The exporters a ``traces`` setting names (``[]`` = off); ValueError for an unknown one."""
    out = []
    for part in (spec or "").split(","):
        part = part.strip()
        if not part or part.lower() == "off":
            continue
        if part in ("console", "otlp") or (part.startswith("file:") and len(part) > 5):
            out.append(part)
        else:
            raise ValueError(f"traces: unknown exporter {part!r}; use off, console, otlp or file:PATH (comma-separated)")
    return out


_OTEL_EXPORTERS = {"otlp": "otlp", "console": "console", "none": None}


def exporters(spec: str | None, environ: Any = None) -> list[str]:
    """The exporters to run: the ``traces`` setting's, plus the standard ``OTEL_*`` variables' (module docstring).
    ValueError names an unknown exporter."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    out = parse(spec)
    named = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if named:
        for part in named.split(","):
            part = part.strip().lower()
            if part not in _OTEL_EXPORTERS:
                raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {part!r}; use otlp, console or none (files: the config's traces)")
            if _OTEL_EXPORTERS[part]:
                out.append(str(_OTEL_EXPORTERS[part]))
    elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        out.append("otlp")
    return list(dict.fromkeys(out))


def setup(spec: str | None, role: str, site: str) -> bool:
    """Configure this role process's traces from its ``traces`` setting and the ``OTEL_*`` variables (see the
    module docstring).

    Returns whether traces are on. Raises ValueError for a bad setting or a missing SDK/exporter package."""
    if os.environ.get("MPDP_TRACES"):
        log.warning("MPDP_TRACES is deprecated and goes in the next release: use OTEL_TRACES_EXPORTER (otlp, console) "
                    "or the config's traces (file:PATH)")
    chosen = exporters(spec)
    if not chosen:
        return False
    try:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        raise ValueError("traces are on but the OpenTelemetry SDK is not installed: pip install 'mpdp[traces]'") from None
    processors: list[Any] = []
    for e in chosen:
        if e == "console":
            processors.append(SimpleSpanProcessor(JsonLinesExporter(stream=sys.stderr)))
        elif e.startswith("file:"):
            path = e[5:].replace("{role}", role).replace("{site}", site).replace("{pid}", str(os.getpid()))
            processors.append(SimpleSpanProcessor(JsonLinesExporter(path=path)))
        else:
            processors.append(BatchSpanProcessor(_otlp_exporter()))
    configure(role, site, processors, set_global=True)
    log.info("traces on: %s", ", ".join(chosen))
    return True


def _otlp_exporter() -> Any:
    """The OTLP span exporter: gRPC unless OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL says http/protobuf (either when only one
    is installed); it reads its endpoint and headers from the OTEL_EXPORTER_OTLP_* variables itself."""
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    kinds = ["http", "grpc"] if protocol.startswith("http") else ["grpc", "http"]
    for kind in kinds:
        try:
            if kind == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            continue
        return OTLPSpanExporter()
    raise ValueError("traces: otlp needs the OTLP exporter: pip install opentelemetry-exporter-otlp")


def configure(role: str, site: str, processors: Sequence[Any], *, set_global: bool = False) -> Any:
    """Turn traces on in this process with these SDK span processors (tests: ``SimpleSpanProcessor(InMemorySpanExporter())``).

    Returns the SDK ``TracerProvider``; :func:`shutdown` turns traces off again."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    attrs = {"service.instance.id": site, "mpdp.role": role, "mpdp.site": site}
    if not os.environ.get("OTEL_SERVICE_NAME"):  # set, it names the service (Resource.create reads it and OTEL_RESOURCE_ATTRIBUTES)
        attrs["service.name"] = f"mpdp-{role}"
    resource = Resource.create(attrs)
    provider = TracerProvider(resource=resource)
    for p in processors:
        provider.add_span_processor(p)
    if set_global:  # other instrumentation in this process then joins the same provider
        trace.set_tracer_provider(provider)
    shutdown()
    _S.provider, _S.role, _S.site = provider, role, site
    _S.tracer = provider.get_tracer("mpdp")
    return provider


def shutdown() -> None:
    """Flush and stop the exporters; traces are off afterwards."""
    provider, _S.provider, _S.tracer = _S.provider, None, None
    if provider is not None:
        try:
            provider.shutdown()
        except Exception:  # noqa: BLE001 - a collector that cannot be reached must not fail the process's exit
            log.warning("traces: the exporters could not be flushed at shutdown")


# -- propagation over gRPC metadata ---------------------------------------------------------------------------
def outgoing(ctx: otel_context.Context | None = None) -> tuple[tuple[str, str], ...] | None:
    """Metadata for an outgoing call: the current span (or ``ctx``'s) as ``traceparent``; None when traces are off."""
    if _S.tracer is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    return tuple(carrier.items()) or None


def extract(metadata: Sequence[tuple[str, Any]] | None) -> otel_context.Context | None:
    """The remote span context a call's metadata carries, or None (traces off, or none sent)."""
    if _S.tracer is None or not metadata:
        return None
    carrier = {k: v for k, v in metadata if k in (TRACEPARENT, TRACESTATE) and isinstance(v, str)}
    if TRACEPARENT not in carrier:
        return None
    ctx = _PROPAGATOR.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


_NULL = contextlib.nullcontext()


def incoming(metadata: Sequence[tuple[str, Any]] | None) -> contextlib.AbstractContextManager[Any]:
    """While serving a call: its caller's span (from ``traceparent``) is the current context, so a job the call
    creates joins the caller's trace. Traces off or no ``traceparent``: a shared no-op context."""
    ctx = extract(metadata)
    return _NULL if ctx is None else _attached(ctx)


@contextlib.contextmanager
def _attached(ctx: otel_context.Context) -> Iterator[None]:
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        _detach(token)


def _detach(token: Any) -> None:
    try:
        otel_context.detach(token)
    except Exception:  # noqa: BLE001 - a context switched under us (an async generator closed elsewhere): harmless
        pass


# -- the spans of one job at this role ------------------------------------------------------------------------
class JobTrace:
    """A job's span at this role and its current stage span (children of it).

    ``enter(state)`` ends the stage span of the previous state and opens one for the new state; ``end(state)``
    ends both (the job span records the terminal state, and a Problem's name as its error status). The job span's
    parent is the current context at creation: the remote caller's span at a party or node (:func:`incoming`),
    none at the curator (a new trace) unless its own caller sent one."""

    def __init__(self, tracer: trace.Tracer, job_id: str, protocol: str, role: str, parent: otel_context.Context | None = None) -> None:
        self._tracer = tracer
        self._base = {"mpdp.job_id": job_id, "mpdp.protocol": protocol, "mpdp.role": role}
        if _S.site:
            self._base["mpdp.site"] = _S.site
        self._protocol = protocol
        self._lock = threading.Lock()
        self.root = tracer.start_span(f"{protocol} job", context=parent, attributes=self._base)
        self._root_ctx = trace.set_span_in_context(self.root)
        self._stage: Any = None
        self.state: str | None = None
        self.ended = False

    def enter(self, state: str, stage: str | None = None) -> None:
        with self._lock:
            if self.ended or state == self.state:
                return
            if self._stage is not None:
                self._stage.end()
            attrs = dict(self._base, **{"mpdp.state": state})
            if stage:
                attrs["mpdp.stage"] = stage
            self._stage = self._tracer.start_span(f"{self._protocol} {state}", context=self._root_ctx, attributes=attrs)
            self.state = state

    def end(self, state: str, problem: str = "") -> None:
        with self._lock:
            if self.ended:
                return
            self.ended = True
            if self._stage is not None:
                self._stage.end()
                self._stage = None
            self.state = state
            self.root.set_attribute("mpdp.state", state)
            if problem:
                self.root.set_attribute("mpdp.problem", problem)
                self.root.set_status(trace.Status(trace.StatusCode.ERROR, problem))
            self.root.end()

    def context(self) -> otel_context.Context:
        """The current stage's span (the job's span before the first stage and after the end) as a context."""
        stage = self._stage
        return trace.set_span_in_context(stage) if stage is not None else self._root_ctx

    def use(self) -> contextlib.AbstractContextManager[Any]:
        """Make the current stage the current span (calls made meanwhile carry it; tasks spawned inherit it)."""
        return _attached(self.context())


class _NoTrace:
    """Traces off: the same interface, doing nothing."""

    state: str | None = None
    ended = True

    def enter(self, state: str, stage: str | None = None) -> None:
        pass

    def end(self, state: str, problem: str = "") -> None:
        pass

    def context(self) -> otel_context.Context | None:
        return None

    def use(self) -> contextlib.AbstractContextManager[Any]:
        return _NULL


NO_TRACE = _NoTrace()


def job(job_id: str, protocol: str, role: str, parent: otel_context.Context | None = None) -> JobTrace | _NoTrace:
    """The spans of a job at this role (a no-op object when traces are off). ``parent``: default the current context."""
    tracer = _S.tracer
    if tracer is None:
        return NO_TRACE
    return JobTrace(tracer, job_id, protocol, role, parent)


class _Outcome:
    """What :func:`job_span` yields: ``done(state, problem)`` records how the job ended at this role."""

    def __init__(self, span: Any = None) -> None:
        self._span = span
        self.problem = ""

    def done(self, state: str, problem: str = "") -> None:
        if self._span is None:
            return
        self._span.set_attribute("mpdp.state", state)
        if problem:
            self.problem = problem
            self._span.set_attribute("mpdp.problem", problem)
            self._span.set_status(trace.Status(trace.StatusCode.ERROR, problem))


_NO_OUTCOME = _Outcome()


@contextlib.contextmanager
def job_span(job_id: str, protocol: str, role: str, parent: otel_context.Context | None = None) -> Iterator[_Outcome]:
    """One span for a whole job at this role, current while the block runs (flows without a hosted machine:
    local release, ensemble, contribution rounds). Its parent: ``parent``, else the current context (a caller's
    span at a party). An exception leaves an error status naming its type only."""
    tracer = _S.tracer
    if tracer is None:
        yield _NO_OUTCOME
        return
    attrs = {"mpdp.job_id": job_id, "mpdp.protocol": protocol, "mpdp.role": role}
    if _S.site:
        attrs["mpdp.site"] = _S.site
    with tracer.start_as_current_span(f"{protocol} job", context=parent, attributes=attrs, record_exception=False, set_status_on_exception=False) as span:
        outcome = _Outcome(span)
        try:
            yield outcome
        except BaseException as e:
            if not outcome.problem:
                span.set_status(trace.Status(trace.StatusCode.ERROR, type(e).__name__))
            raise


# -- a span exporter writing JSON lines ---------------------------------------------------------------------------
def span_record(span: Any) -> dict[str, Any]:
    """One finished SDK span as a JSON-able dict (ids as hex, times in ns since the epoch)."""
    ctx = span.get_span_context()
    parent = span.parent
    return {
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(parent.span_id, "016x") if parent is not None else None,
        "parent_remote": bool(parent.is_remote) if parent is not None else None,
        "name": span.name,
        "start": span.start_time,
        "end": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "resource": dict(span.resource.attributes) if span.resource is not None else {},
    }


try:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class JsonLinesExporter(SpanExporter):
        """Appends each span as one JSON object per line to ``path`` (or writes to ``stream``).

        Each line is written in one ``write`` on a file opened for appending, so several processes (a compute node's
        workers) may share a file."""

        def __init__(self, path: str | os.PathLike | None = None, stream: Any = None) -> None:
            self._path = path
            self._stream = stream
            self._lock = threading.Lock()
            if path is not None:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            text = "".join(json.dumps(span_record(s), default=str) + "\n" for s in spans)
            try:
                with self._lock:
                    if self._path is not None:
                        with open(self._path, "a", encoding="utf-8") as f:
                            f.write(text)
                    else:
                        self._stream.write(text)
                        self._stream.flush()
            except OSError:
                log.warning("traces: could not write %d spans", len(spans))
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

except ImportError:  # the API alone: nothing to export to
    JsonLinesExporter = None  # type: ignore[assignment,misc]

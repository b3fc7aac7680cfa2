"""A local federation: curator and K parties as separate OS processes on loopback, with a throwaway CA.

Used by `mpdp federation up`, `mpdp demo`, the integration tests and the benchmarks. The curator and every compute
node bind port 0 and print ``MPDP-READY <port>`` once they serve; a party listens on no port (it dials the curator and
keeps its link open: services/party/link.py) and prints ``MPDP-READY 0 … local=<socket>`` once its link is open, so
starting never relies on sleeps. ``endpoints.json`` in the work folder tells clients where everything is.

Every service is started by :func:`mpdp_services.common.processes.spawn`, so it dies with the process that started
the federation (the CLI, a benchmark, a test), even when that process is killed with SIGKILL. Private keys are
born 0600 and every file is written durably (:mod:`mpdp_services.common.durable`).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from mpdp_services.common import pki
from mpdp_services.common.link import LINK_ADDRESS
from mpdp_services.common.durable import PRIVATE, PUBLIC, make_private_dir, write_atomic
from mpdp_services.common.processes import spawn


@dataclass
class Proc:
    name: str
    role: str
    popen: subprocess.Popen
    port: int
    log: Path
    http_port: int = 0  # the metrics endpoint (GET /metrics), 0 if the role serves none
    local_socket: str = ""  # a party's services' unix-domain socket (it has no gRPC port: port is 0; services/party/link.py)


@dataclass
class LocalFederation:
    workdir: Path
    parties: list[str]
    datasets: dict[str, dict[str, dict]] = field(default_factory=dict)  # party → dataset name → DatasetConfig dict
    test_mode: bool = False
    paillier_bits: int = 2048
    dgk_bits: int = 2048
    budget_epsilon: float = 100.0
    budget_delta: float = 1e-3
    federation: str = "local"
    compute_nodes: list[str] = field(default_factory=list)
    node_workers: int = 1  # processes per compute node (ComputeNodeConfig.workers)
    auxiliary: dict[str, dict] = field(default_factory=dict)  # curator: public auxiliary dataset name → DatasetConfig dict
    local_classifiers: dict[str, str] = field(default_factory=dict)  # party → its local model for ensemble jobs
    log_format: str = "text"  # each role's service.log: text, or json lines (services/common/logs.py)
    curator_options: dict = field(default_factory=dict)  # extra curator configuration fields (e.g. admission bounds)
    node_options: dict = field(default_factory=dict)  # extra compute-node configuration fields (e.g. report_every, backlog_mib)
    party_options: dict = field(default_factory=dict)  # extra configuration fields of every party (e.g. local_work_seconds)
    members: list[str] | None = None  # the federation's parties every party takes jobs over (default: ``parties``)
    env: dict[str, str] = field(default_factory=dict)  # extra environment of every role (e.g. NUMBA_CACHE_DIR), over this process's
    procs: dict[str, Proc] = field(default_factory=dict)

    # -- PKI and configs ----------------------------------------------------------------------
    def provision(self) -> None:
        self.workdir.mkdir(mode=0o755, parents=True, exist_ok=True)
        ca_key, ca_cert = pki.make_ca(self.federation)
        ca = make_private_dir(self.workdir / "ca")
        write_atomic(ca / "ca.key", pki.pem_key(ca_key), PRIVATE)
        write_atomic(ca / "ca.crt", pki.pem_cert(ca_cert), PUBLIC)
        sites = [("curator", "curator")] + [(p, "party") for p in self.parties] + [(n, "compute_node") for n in self.compute_nodes] + [("operator", "operator")]
        for site, role in sites:
            key, cert = pki.issue(ca_key, ca_cert, role, site, ["127.0.0.1", "localhost"])
            pki.write_site(self.workdir / site, key, cert, ca_cert)
        self.write_configs()

    def write_configs(self) -> None:
        """Every role's config from this object's fields (datasets, schemas, budgets, …), over any a previous run wrote;
        the certificates and every role's state (ledgers, published models) are kept."""
        tls = {"cert": "site.crt", "key": "site.key", "ca": "ca.crt"}
        common = {"federation": self.federation, "test_mode": self.test_mode, "paillier_bits": self.paillier_bits, "listen": "127.0.0.1:0"}
        _write_yaml(self.workdir / "curator" / "curator.yaml", {**common, "name": "curator", "tls": tls, "state_dir": "state", "dgk_bits": self.dgk_bits, "auxiliary": self.auxiliary,
                                                                  "members": self._members(), "compute_node_members": list(self.compute_nodes),
                                                                  **self.curator_options})
        for p in self.parties:
            _write_yaml(
                self.workdir / p / "party.yaml",
                {**common, "name": p, "tls": tls, "curator": {"address": "PLACEHOLDER", "name": "curator"}, "datasets": self.datasets.get(p, {}),
                 "ledger": "state/ledger.json", "budget_epsilon": self.budget_epsilon, "budget_delta": self.budget_delta,
                 "members": self._members(),
                 "local_classifier": self.local_classifiers.get(p, "logreg"), **self.party_options},
            )

        for n in self.compute_nodes:
            _write_yaml(self.workdir / n / "compute_node.yaml", {**common, "name": n, "tls": tls, "curator": {"address": "PLACEHOLDER", "name": "curator"}, "workers": self.node_workers,
                                                                      **self.node_options})

    def _members(self) -> list[str]:
        """The federation's parties as provisioned: every party takes jobs over these only, and only these may
        register at the curator."""
        return list(self.members if self.members is not None else self.parties)

    # -- processes --------------------------------------------------------------------------------
    def start(self, timeout: float = 180.0, on_ready: Callable[[Proc], None] | None = None) -> None:
        """Provision if needed, start the curator, then every party and compute node; ``on_ready(proc)`` is called as
        each one reports ready (its port known)."""
        (self.workdir / "endpoints.json").unlink(missing_ok=True)  # a previous run's: it appears again once every role is up
        if not (self.workdir / "ca" / "ca.crt").exists():
            self.provision()
        cur = self._spawn("curator", "curator", self.workdir / "curator" / "curator.yaml", [])
        self.procs["curator"] = cur
        self._wait_ready([cur], timeout, on_ready)
        for name, role in [(p, "party") for p in self.parties] + [(n, "compute-node") for n in self.compute_nodes]:
            cfgp = self.workdir / name / _CONFIG[role]
            cfg = yaml.safe_load(cfgp.read_text())
            cfg["curator"]["address"] = f"127.0.0.1:{cur.port}"
            _write_yaml(cfgp, cfg)
            self.procs[name] = self._spawn(name, role, cfgp, [])
        self._wait_ready([self.procs[p] for p in self.parties + self.compute_nodes], timeout, on_ready)
        self.write_endpoints()

    def restart(self, name: str, timeout: float = 120.0) -> None:
        """Start a stopped process again with the same config on the same port (e.g. after a crash test)."""
        old = self.procs[name]
        cfg = self.workdir / name / _CONFIG[old.role]
        data = yaml.safe_load(cfg.read_text())
        if old.port:
            data["listen"] = f"127.0.0.1:{old.port}"
        if old.http_port:
            data["http_listen"] = f"127.0.0.1:{old.http_port}"
        _write_yaml(cfg, data)
        proc = self._spawn(name, old.role, cfg, [])
        self.procs[name] = proc
        self._wait_ready([proc], timeout)
        self.write_endpoints()

    def _spawn(self, name: str, role: str, config: Path, extra: list[str]) -> Proc:
        log = self.workdir / name / "service.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE), "ab") as stderr:
            popen = spawn(
                [sys.executable, "-m", "mpdp_services.cli.main", "serve", role, "--config", str(config), "--log-format", self.log_format, *extra],
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=env,
                cwd=str(self.workdir / name),
                start_new_session=True,
            )
        return Proc(name, role, popen, 0, log)

    def _wait_ready(self, procs: list[Proc], timeout: float, on_ready: Callable[[Proc], None] | None = None) -> None:
        sel = selectors.DefaultSelector()
        pending = {p.popen.stdout.fileno(): p for p in procs}  # type: ignore[union-attr]
        for p in procs:
            sel.register(p.popen.stdout, selectors.EVENT_READ, p)  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout
        try:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{', '.join(p.name for p in pending.values())} did not become ready in {timeout:g} s; see their service.log")
                for key, _ in sel.select(left):
                    ready: Proc = key.data
                    out = ready.popen.stdout
                    assert out is not None  # spawned with stdout=PIPE
                    line = out.readline().decode()
                    if not line:
                        raise RuntimeError(f"{ready.name} exited during start-up (code {ready.popen.wait()}); log:\n{ready.log.read_text()[-3000:]}")
                    if line.startswith("MPDP-READY "):
                        words = line.split()
                        ready.port = int(words[1])
                        ready.http_port = next((int(w[5:]) for w in words[2:] if w.startswith("http=")), 0)
                        ready.local_socket = next((w[6:] for w in words[2:] if w.startswith("local=")), "")
                        sel.unregister(out)
                        pending.pop(out.fileno())
                        if on_ready is not None:
                            on_ready(ready)
        finally:
            sel.close()

    def write_endpoints(self) -> Path:
        data = {
            "federation": self.federation,
            "curator": {"address": f"127.0.0.1:{self.procs['curator'].port}", "name": "curator"},
            "parties": {p: LINK_ADDRESS for p in self.parties if p in self.procs},  # no address: each is reached over its link to the curator
            "compute_nodes": {n: f"127.0.0.1:{self.procs[n].port}" for n in self.compute_nodes if n in self.procs},
            "operator_tls": {k: str(self.workdir / "operator" / v) for k, v in {"cert": "site.crt", "key": "site.key", "ca": "ca.crt"}.items()},
            "pids": {n: pr.popen.pid for n, pr in self.procs.items()},
            "http": {n: f"http://127.0.0.1:{pr.http_port}" for n, pr in self.procs.items() if pr.http_port},  # URL/metrics
        }
        path = self.workdir / "endpoints.json"
        write_atomic(path, json.dumps(data, indent=2), PUBLIC)
        return path

    def wait_precomputed(self, timeout: float = 300.0) -> None:
        """Block until every party reports its randomness pools full (health service ``mpdp.precompute``)."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        creds = grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)  # a party has no port: its local socket, on this machine
        for p in self.parties:
            with grpc.secure_channel(f"unix:{self.procs[p].local_socket}", creds) as ch:
                stub = health_pb2_grpc.HealthStub(ch)
                for resp in stub.Watch(health_pb2.HealthCheckRequest(service="mpdp.precompute"), timeout=timeout):
                    if resp.status == health_pb2.HealthCheckResponse.SERVING:
                        break

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs[name]
        if p.popen.poll() is None:
            p.popen.send_signal(sig)
            p.popen.wait(30)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.popen.wait(20)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()
            if p.popen.stdout:
                p.popen.stdout.close()

    def __enter__(self) -> "LocalFederation":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_CONFIG = {"curator": "curator.yaml", "party": "party.yaml", "compute-node": "compute_node.yaml"}


def _write_yaml(path: Path, data: dict) -> None:
    """A site's config: no secrets in it (the key is a separate file), so readable like its certificate."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, yaml.safe_dump(data, sort_keys=False), PUBLIC)

"""Validated vs unvalidated DCA contributions: client proof time, node verification time, bytes per client.

    python benchmarks/dca_validated.py [--dims 10,1000] [--clients 1000,10000] [--nodes 3] [--kinds range,l2,one-hot]
        [--sample 20] [--end-to-end 200] [--json benchmarks/results/dca_validated.json]

Per (kind, d, M), on ``--sample`` clients (the per-client costs do not depend on N):

* ``client_ms`` — one client's step 1–2: clip, round, and for a validated job (no noise: the compute nodes add it) the
  bit encoding, Field64 shares, joint randomness and the proof (R repetitions); unvalidated: exact discrete-Gaussian
  noise, encoding into Z_(2^64) and M-way sharing;
* ``node_ms`` — one node's work for one client: unvalidated, unpack and add the share; validated, check lengths and
  canonical elements, recompute its joint-randomness part, the query (its verifier share) and its output share;
* ``client_batch_ms`` / ``node_batch_ms`` — the same per client when ``--sample`` clients are proven together
  (:func:`mpdp.dca.validation.client_shares_packed`, a load generator's batch) or verified together
  (:func:`mpdp.dca.validation.check_packed`, what a node does with a ShareBatch of ValidatedShares);
* ``decide_ms`` — one node's decision once the M verifier records are in (validated only);
* ``bytes`` — the client's messages to all M nodes (serialised ClientShare), full shares and seed-compressed;
  ``record_bytes`` — one verifier record a node sends each other node (in its received-set report).

Node time for N clients is N·(node_batch_ms + decide_ms) (``node_seconds_batched``; N·(node_ms + decide_ms) one
client at a time, ``node_seconds``), reported for every ``--clients`` N (a projection: linear in N,
no per-job term is left out at these sizes). ``--end-to-end`` N > 0 also runs one whole job of N clients through the
real machines in one process (mpdp.dca.driver: clients, M nodes, the aggregator; no network, no TLS) for each d,
validated (range) and unvalidated, and reports its wall time. This is the core cost only: a run over real processes and
TLS adds the transport, the same for both modes but for the validated mode's larger messages: ``--federation``
runs whole jobs that way (:func:`federation_jobs`), timed from the first share built (the simulated clients' proving
included). With ``--prebuilt`` they are timed in the convention of Heikkilä et al. 2017, Table 1 ("encryption
excluded"): every client's submissions built before the clock (on disk, by ``--build-processes`` processes) and
streamed to the nodes as fast as they take them (:func:`prebuilt_jobs`, benchmarks/dca_prebuilt.py); each row's
``convention`` says which. ``--sample 0`` skips the per-client cells.
The machine is shared (2 cores, other jobs running): figures are indicative, the load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from mpdp.dca import sharing, validation
from mpdp.dca.client import contributions, validated_values
from mpdp.dca.driver import run_job
from mpdp.dca.params import DcaParams
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb

EPS, DELTA = 1.0, 1e-5


def params(kind: str, d: int, m: int, n: int, *, seeded: bool = False) -> DcaParams:
    return DcaParams(job_id="bench", dimension=d, clients=n, max_missing=1, epsilon=EPS, delta=DELTA, sensitivity=2.0, nodes=tuple(f"n{k}" for k in range(m)),
                     frac_bits=16, noise="discrete-gaussian", validate=kind, seed_compressed=seeded)


def data(kind: str, d: int, count: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "one-hot":
        return np.eye(d)[rng.integers(d, size=count)]
    z = rng.uniform(-1, 1, (count, d))
    return z / np.maximum(1.0, np.linalg.norm(z, axis=1, keepdims=True)) if kind == "l2" else z


def measure(kind: str, d: int, m: int, sample: int) -> dict:
    rng = np.random.default_rng(d)
    Z = data(kind, d, sample, rng)
    out: dict = {"kind": kind, "d": d, "M": m}
    if kind == "none":
        prm = params("none", d, m, 1000)
        t_client, t_node, nbytes = [], [], 0
        for i in range(sample):
            t0 = time.perf_counter()
            _, _, u = contributions(prm, Z[i], Drbg.from_os())
            shares = sharing.share_u64(u, m, Drbg.from_os())
            msgs = [pb.ClientShare(job_id="bench", client_id=f"c{i}", spec_digest=prm.spec_digest, masked_vector=sharing.pack_u64(shares[k])) for k in range(m)]
            t_client.append(time.perf_counter() - t0)
            acc = np.zeros(d, dtype=np.uint64)
            t0 = time.perf_counter()
            acc += sharing.unpack_u64(msgs[1].masked_vector, d)
            t_node.append(time.perf_counter() - t0)
            nbytes = sum(len(x.SerializeToString()) for x in msgs)
        out.update(client_ms=1e3 * statistics.median(t_client), node_ms=1e3 * statistics.median(t_node), decide_ms=0.0, bytes=nbytes,
                   bytes_seed_compressed=len(msgs[0].SerializeToString()) + (m - 1) * (len(msgs[1].SerializeToString()) - 8 * d + sharing.SEED_BYTES),
                   record_bytes=0)
        return out
    for seeded in (False, True):
        prm = params(kind, d, m, 1000, seeded=seeded)
        plan = prm.validation
        assert plan is not None
        key = os.urandom(32)
        t_client, t_node, t_decide, nbytes = [], [], [], 0
        for i in range(sample):
            cid = f"c{i}"
            t0 = time.perf_counter()
            y = validated_values(prm, Z[i], Drbg.from_os())
            meas = validation.encode_input(plan, y)
            shares = validation.client_shares(plan, "bench", cid, meas, m, seeded=seeded)
            msgs = [pb.ClientShare(job_id="bench", client_id=cid, spec_digest=prm.spec_digest, validated=pb.ValidatedShare(
                measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts)) for s in shares]
            t_client.append(time.perf_counter() - t0)
            nbytes = sum(len(x.SerializeToString()) for x in msgs)
            records = []
            for k in range(m):
                t0 = time.perf_counter()
                _, rec = validation.check_share(plan, shares[k], job_id="bench", client_id=cid, k=k, nodes=m, seeded=seeded, verify_key=key)
                t_node.append(time.perf_counter() - t0)
                records.append(rec)
            t0 = time.perf_counter()
            ok = validation.decide(plan, records)
            t_decide.append(time.perf_counter() - t0)
            assert ok
        # many clients at once: a load generator proving a batch, a node verifying a run of shares (one stream)
        t0 = time.perf_counter()
        rows = [validated_values(prm, Z[i], Drbg.from_os()) for i in range(sample)]
        meas_b = validation.encode_inputs(plan, np.stack(rows))
        many = validation.client_shares_packed(plan, "bench", [f"c{i}" for i in range(sample)], meas_b, m, seeded=seeded)
        t_client_batch = (time.perf_counter() - t0) / sample
        t0 = time.perf_counter()
        checked = validation.check_packed(plan, many[1], job_id="bench", client_ids=[f"c{i}" for i in range(sample)], k=1, nodes=m,
                                          seeded=seeded, verify_key=key)
        t_node_batch = (time.perf_counter() - t0) / sample
        assert not any(isinstance(x, validation.MalformedShare) for x in checked)
        tag = "_seed_compressed" if seeded else ""
        out[f"client_batch_ms{tag}"] = 1e3 * t_client_batch
        out[f"node_batch_ms{tag}"] = 1e3 * t_node_batch
        if not seeded:
            out.update(client_ms=1e3 * statistics.median(t_client), node_ms=1e3 * statistics.median(t_node), decide_ms=1e3 * statistics.median(t_decide),
                       bytes=nbytes, record_bytes=plan.record_bytes, proofs=plan.circuit.proofs, meas_len=plan.circuit.meas_len,
                       proof_len=plan.circuit.proofs * plan.circuit.proof_len, soundness_log2=plan.circuit.soundness_log2)
        else:
            out[f"bytes{tag}"] = nbytes
            out[f"client_ms{tag}"] = 1e3 * statistics.median(t_client)
            out[f"node_ms{tag}"] = 1e3 * statistics.median(t_node)
    return out


def end_to_end(d: int, m: int, n: int) -> list[dict]:
    rows = []
    for kind in ("none", "range"):
        prm = params(kind, d, m, n)
        Z = data(kind, d, n, np.random.default_rng(n))
        t0 = time.perf_counter()
        run = run_job(prm, Z, Drbg.from_os(), client_mode="machines", record=False)
        seconds = time.perf_counter() - t0
        assert run.release is not None, run.error
        rows.append({"kind": kind, "d": d, "M": m, "N": n, "seconds": seconds, "clients_seconds": run.seconds.get("clients", 0.0),
                     "nodes_seconds": run.seconds.get("network+nodes", 0.0), "rejected": run.release.clients_rejected})
    return rows


def federation_jobs(sizes: list[tuple[int, int]], m: int, key_bits: int) -> list[dict]:
    """Whole jobs over real processes and mutual TLS (a LocalFederation: the curator and M compute nodes): for each
    (N, d), an unvalidated discrete-Gaussian job and a validated (range) one, both from one load-generator process
    (no process pool for either) sending ShareBatch messages (validated: ValidatedShares, ≤ 1024 clients a batch, the
    next batch proven in a thread while the nodes verify the previous one). Seconds from the first share built to
    RELEASED seen by the operator; job creation excluded."""
    import asyncio
    import tempfile

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import DcaOperator, submit_cohort
    from mpdp_services.launcher.federation import LocalFederation

    rows = []
    nodes = [f"node-{k + 1}" for k in range(m)]
    with tempfile.TemporaryDirectory() as tmp:
        fed = LocalFederation(Path(tmp) / "fed", [], {}, test_mode=True, paillier_bits=key_bits, dgk_bits=key_bits, compute_nodes=nodes)
        fed.start()
        try:
            ep = Endpoints.load(fed.workdir)
            for n, d in sizes:
                for kind in ("none", "range"):
                    spec = params(kind, d, m, n).to_spec()
                    spec.compute_nodes[:] = nodes
                    spec.roster_range.prefix, spec.roster_range.digits = "client-", 6
                    spec.deadline_seconds = 3600.0
                    Z = data(kind, d, n, np.random.default_rng(n + d))
                    ids = [f"client-{i:06d}" for i in range(n)]
                    with DcaOperator(ep) as op:
                        job = op.create(spec)
                        la0 = os.getloadavg()
                        t0 = time.perf_counter()
                        rep = asyncio.run(submit_cohort(ep, ep.tls, job, ids, Z, batched=True, batch_size=max(1, (4 << 20) // (8 * d))))
                        st = op.wait(job, timeout=3600)
                        seconds = time.perf_counter() - t0
                        rel = op.release(job) if st.state == "RELEASED" else None
                    row = {"kind": kind, "N": n, "d": d, "M": m, "convention": "clients-timed", "seconds": seconds, "commit": COMMIT, "client_seconds": rep.client_seconds, "state": st.state,
                           "accepted": rep.accepted, "rejected_shares": len(rep.rejected), "clients_included": rel.clients_included if rel else 0,
                           "clients_rejected": rel.clients_rejected if rel else 0, "load_before": la0, "load_after": os.getloadavg()}
                    rows.append(row)
                    print(f"federation (TLS): {row}", flush=True)
        finally:
            fed.stop()
    return rows


def wait_for_quiet(threshold: float, most: float = 3600.0) -> None:
    """Before a timed phase: wait (at most ``most`` seconds) until the host's 1-minute load average is below ``threshold``,
    so a long untimed build on a shared machine can be followed by a timed phase on a quiet one (the load is recorded)."""
    end = time.monotonic() + most
    while os.getloadavg()[0] >= threshold and time.monotonic() < end:
        print(f"prebuilt: waiting for the 1-minute load ({os.getloadavg()[0]:.1f}) to fall below {threshold} …", flush=True)
        time.sleep(15)


def prebuilt_jobs(sizes: list[tuple[int, int]], m: int, key_bits: int, *, seeded: bool, processes: int, workdir: str | None, window: int,
                  node_workers: int, deadline: float, warmup: bool = True, quiet_load: float = 0.0) -> list[dict]:
    """Whole jobs in the paper's convention (Table 1, "encryption excluded"): for each (N, d), an unvalidated
    discrete-Gaussian job and a validated (range) one over real processes and mutual TLS, every client's submissions
    built before the clock (benchmarks/dca_prebuilt.py: the load generator's batches and bytes, written to disk by a
    process pool), then streamed to the M nodes as fast as they take them. Seconds from the first byte sent to
    RELEASED seen by the operator; the build time beside it; per node its CPU seconds and peak RSS over the timed phase."""
    import asyncio
    import shutil
    import tempfile

    import dca_prebuilt

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import BATCH_BYTES, DcaOperator, _node_channels, batch_size_for, fetch_job, validated_batch_size
    from mpdp_services.launcher.federation import LocalFederation

    rows = []
    nodes = [f"node-{k + 1}" for k in range(m)]
    with tempfile.TemporaryDirectory() as tmp:
        fed = LocalFederation(Path(tmp) / "fed", [], {}, test_mode=True, paillier_bits=key_bits, dgk_bits=key_bits, compute_nodes=nodes,
                              node_workers=node_workers)
        fed.start()
        try:
            ep = Endpoints.load(fed.workdir)
            meter = dca_prebuilt.NodeMeter({k: fed.procs[k].popen.pid for k in nodes})
            # an untimed validated job of a few clients per d first: the nodes load their compiled kernels (≈ 1 s of
            # CPU a process) there, not in the first measured cell; its rows are kept, marked "warmup"
            warm = [(20, wd, True) for wd in dict.fromkeys(d for _, d in sizes)] if warmup else []
            for n, d, is_warmup in warm + [(n, d, False) for n, d in sizes]:
                for kind in ("range",) if is_warmup else ("none", "range"):
                    prm = params(kind, d, m, n, seeded=seeded)
                    spec = prm.to_spec()
                    spec.compute_nodes[:] = nodes
                    spec.roster_range.prefix, spec.roster_range.digits = "client-", 6
                    spec.deadline_seconds = deadline
                    most = max(1, (4 << 20) // (8 * d))  # the clients-timed mode's batch_size, passed to submit_cohort
                    with DcaOperator(ep) as op, tempfile.TemporaryDirectory(dir=workdir, prefix="dca-prebuilt-") as files:
                        job = op.create(spec)
                        ann = asyncio.run(fetch_job(ep.curator_address, ep.curator_name, ep.tls, job))
                        jp = DcaParams.from_spec(job, ann.spec)
                        batch = (validated_batch_size(jp, n, BATCH_BYTES, most) if jp.validation is not None
                                 else batch_size_for(d, n, BATCH_BYTES, len(f"client-{n - 1:06d}"), most))
                        print(f"prebuilt: building {kind} N={n} d={d} M={m} ({processes} processes, batches of {batch}) …", flush=True)
                        built = dca_prebuilt.build(job, ann.spec.SerializeToString(), kind, n, batch, m, Path(files), processes)
                        disk = shutil.disk_usage(files)

                        async def timed() -> tuple[dca_prebuilt.StreamReport, float]:
                            channels = _node_channels(ann, ep.tls)
                            try:
                                await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 60) for c in channels))  # TLS up before the clock
                                meter.start()
                                t = time.perf_counter()
                                return await dca_prebuilt.stream(built, channels, window), t
                            finally:
                                await asyncio.gather(*(c.close() for c in channels))

                        if quiet_load:
                            wait_for_quiet(quiet_load)
                        la0 = os.getloadavg()
                        cpu0 = time.process_time()  # this process (the streamer: reading files, TLS) over the timed phase
                        rep, t0 = asyncio.run(timed())
                        streamed = time.perf_counter() - t0
                        st = op.wait(job, timeout=deadline)
                        seconds = time.perf_counter() - t0
                        per_node = meter.stop()
                        streamer_cpu = time.process_time() - cpu0
                        la1 = os.getloadavg()
                        rel = op.release(job) if st.state == "RELEASED" else None
                    for k, name in enumerate(nodes):
                        per_node[name].update(bytes_sent=rep.bytes[k], messages=rep.messages[k])
                    row = {"kind": kind, "N": n, "d": d, "M": m, "convention": "prebuilt (clients' share generation not timed)", "warmup": is_warmup, "seconds": seconds,
                           "stream_seconds": streamed, "build_seconds": built.seconds, "build_cpu_seconds": built.cpu_seconds, "build_processes": processes,
                           "batch_clients": batch, "seed_compressed": seeded, "node_workers": node_workers, "window": window, "commit": COMMIT, "state": st.state,
                           "accepted": rep.accepted, "rejected_shares": rep.rejected, "clients_included": rel.clients_included if rel else 0,
                           "clients_rejected": rel.clients_rejected if rel else 0, "bytes_sent": sum(rep.bytes), "streamer_cpu_seconds": streamer_cpu, "disk_free_gb_after_build": disk.free / 1e9,
                           "nodes": per_node, "load_before": la0, "load_after": la1}
                    rows.append(row)
                    print(f"prebuilt (TLS){' warm-up' if is_warmup else ''}: {kind} N={n} d={d} M={m}: {seconds:.3g} s ({st.state}; stream {streamed:.3g} s), build {built.seconds:.3g} s, "
                          f"node CPU s {[round(v['cpu_seconds'], 2) for v in per_node.values()]}, peak RSS MiB "
                          f"{[round(v['peak_rss_mib']) for v in per_node.values()]}, sent {sum(rep.bytes) / 1e6:.1f} MB, load {la0[0]:.1f}–{la1[0]:.1f}", flush=True)
        finally:
            fed.stop()
    return rows


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        return ""


COMMIT = _commit()  # the code this process (and the federation it starts) runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="10,1000")
    ap.add_argument("--clients", default="1000,10000")
    ap.add_argument("--nodes", default="3")
    ap.add_argument("--kinds", default="range,l2,one-hot")
    ap.add_argument("--sample", type=int, default=20)
    ap.add_argument("--end-to-end", type=int, default=0, help="also run one whole job of this many clients per d (in process)")
    ap.add_argument("--federation", default="", help="N×d pairs, e.g. 1000x10,100x1000: whole jobs over real processes and TLS")
    ap.add_argument("--prebuilt", action="store_true", help="--federation jobs in the paper's convention: submissions built before the clock, "
                    "streamed from disk (benchmarks/dca_prebuilt.py)")
    ap.add_argument("--full-shares", action="store_true", help="with --prebuilt: full helper shares instead of seed-compressed ones")
    ap.add_argument("--build-processes", type=int, default=2, help="with --prebuilt: processes building the submissions (untimed)")
    ap.add_argument("--build-dir", default=None, help="with --prebuilt: where the submissions are written (a temporary directory inside; default $TMPDIR)")
    ap.add_argument("--quiet-load", type=float, default=0.0, help="with --prebuilt: before each timed phase, wait until the 1-minute load "
                    "average is below this (0: do not wait)")
    ap.add_argument("--window", type=int, default=2, help="with --prebuilt: ShareBatch calls in flight per node")
    ap.add_argument("--node-workers", type=int, default=1, help="with --prebuilt: processes per compute node")
    ap.add_argument("--deadline", type=float, default=10800.0, help="with --prebuilt: the jobs' deadline (s), from creation: covers the build")
    ap.add_argument("--no-warmup", action="store_true", help="with --prebuilt: no untimed validated job of 20 clients per d before the cells")
    ap.add_argument("--key-bits", type=int, default=1024, help="the curator's Paillier/DGK keys (unused by DCA; small = fast start)")
    ap.add_argument("--json", default="benchmarks/results/dca_validated.json")
    a = ap.parse_args()
    dims = [int(x) for x in a.dims.split(",")]
    ns = [int(x) for x in a.clients.split(",")]
    ms = [int(x) for x in a.nodes.split(",")]
    kinds = ["none"] + [k for k in a.kinds.split(",") if k]
    started = time.time()
    for kind in kinds[1:] if a.sample > 0 else []:  # compile (or load) the Field64 kernels before anything is timed
        measure(kind, 10, 3, 2)
    cells = []
    print(f"{'kind':8} {'M':>2} {'d':>5} {'client ms':>10} {'(batch)':>8} {'node ms':>9} {'(batch)':>8} {'decide ms':>9} {'bytes':>10} {'bytes (seeds)':>13} "
          + " ".join(f"{'node s, N=' + str(n):>14}" for n in ns))
    for m in ms if a.sample > 0 else []:  # --sample 0: whole jobs only
        for d in dims:
            for kind in kinds:
                if kind == "one-hot" and d > 1000:
                    continue
                c = measure(kind, d, m, a.sample)
                c["node_seconds"] = {str(n): n * (c["node_ms"] + c["decide_ms"]) / 1e3 for n in ns}
                c["node_seconds_batched"] = {str(n): n * (c.get("node_batch_ms", c["node_ms"]) + c["decide_ms"]) / 1e3 for n in ns}
                cells.append(c)
                print(f"{kind:8} {m:>2} {d:>5} {c['client_ms']:>10.2f} {c.get('client_batch_ms', c['client_ms']):>8.2f} {c['node_ms']:>9.3f} "
                      f"{c.get('node_batch_ms', c['node_ms']):>8.3f} {c['decide_ms']:>9.3f} {c['bytes']:>10} {c['bytes_seed_compressed']:>13} "
                      + " ".join(f"{c['node_seconds_batched'][str(n)]:>14.2f}" for n in ns), flush=True)
    e2e = []
    if a.end_to_end:
        for d in dims:
            for row in end_to_end(d, ms[0], a.end_to_end):
                e2e.append(row)
                print(f"end to end (in process): {row}", flush=True)
    fed_rows = []
    for m in ms if a.federation else []:
        sizes = [tuple(int(v) for v in x.split("x")) for x in a.federation.split(",")]
        if a.prebuilt:
            fed_rows += prebuilt_jobs(sizes, m, a.key_bits, seeded=not a.full_shares, processes=a.build_processes, workdir=a.build_dir, window=a.window,
                                      node_workers=a.node_workers, deadline=a.deadline, warmup=not a.no_warmup, quiet_load=a.quiet_load)
        else:
            fed_rows += federation_jobs(sizes, m, a.key_bits)
    result = {"cells": cells, "end_to_end": e2e, "federation": fed_rows, "run": {"argv": a.__dict__, "load": os.getloadavg(), "wall_seconds": time.time() - started,
                                                          "epsilon": EPS, "delta": DELTA, "frac_bits": 16}}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(result, indent=1))
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()

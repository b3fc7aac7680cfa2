// Prio3 (divviup-ts, draft-irtf-cfrg-vdaf-08) per report: the client's shard and one aggregator's preparation.
// Usage: node bench.mjs '<json: {"cells": [{"kind": "sumvec"|"histogram", "length": L, "bits": b, "reports": n}], "shares": M}>'
// Prints one JSON line per cell on stdout.
import { randomBytes } from "node:crypto";
import { Prio3SumVec, Prio3Histogram } from "@divviup/prio3";

const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system); }; // µs of this process

function instance(cell, shares) {
  const chunkLength = Math.max(1, Math.round(Math.sqrt(cell.kind === "histogram" ? cell.length : cell.length * cell.bits)));
  if (cell.kind === "histogram") return { vdaf: new Prio3Histogram({ shares, length: cell.length, chunkLength }), chunkLength };
  return { vdaf: new Prio3SumVec({ shares, length: cell.length, bits: cell.bits, chunkLength }), chunkLength };
}

function measurement(cell, i) {
  if (cell.kind === "histogram") return i % cell.length;
  const top = 2 ** cell.bits;
  return Array.from({ length: cell.length }, (_, j) => (i * 7919 + j * 104729) % top);
}

async function run(cell, shares) {
  const { vdaf, chunkLength } = instance(cell, shares);
  const verifyKey = randomBytes(vdaf.verifyKeySize);
  const reports = [];
  let t0 = cpu();
  for (let i = 0; i < cell.reports; i++) {
    const nonce = randomBytes(vdaf.nonceSize);
    const { publicShare, inputShares } = await vdaf.shard(measurement(cell, i), nonce, randomBytes(vdaf.randSize));
    const bytes = vdaf.encodePublicShare(publicShare).length + inputShares.reduce((s, x) => s + vdaf.encodeInputShare(x).length, 0);
    reports.push({ nonce, publicShare, inputShares, bytes });
  }
  const shardUs = (cpu() - t0) / cell.reports;
  // every aggregator prepares every report (prepareInit), the preparation shares are combined (unshard, done by
  // the leader in DAP), and each aggregator finishes (prepareNext): the per-aggregator part is timed apart
  let initUs = 0, combineUs = 0, nextUs = 0, accepted = 0;
  for (const r of reports) {
    let t = cpu();
    const inits = [];
    for (let k = 0; k < shares; k++) inits.push(await vdaf.prepareInit(verifyKey, k, null, r.nonce, r.publicShare, r.inputShares[k]));
    initUs += cpu() - t;
    t = cpu();
    const msg = await vdaf.unshardPreparationShares(null, inits.map((x) => x.preparationShare));
    combineUs += cpu() - t;
    t = cpu();
    for (const x of inits) { const out = vdaf.prepareNext(x.preparationState, msg); if ("outputShare" in out) accepted += 1; }
    nextUs += cpu() - t;
  }
  const n = cell.reports;
  return {
    ...cell, shares, chunk_length: chunkLength, accepted: accepted / shares,
    shard_us: shardUs, prepare_us_per_aggregator: (initUs + nextUs) / n / shares, combine_us: combineUs / n,
    report_bytes: reports.reduce((s, r) => s + r.bytes, 0) / n,
  };
}

const spec = JSON.parse(process.argv[2]);
for (const cell of spec.cells) {
  await run({ ...cell, reports: Math.min(2, cell.reports) }, spec.shares); // warm-up (JIT)
  console.log(JSON.stringify(await run(cell, spec.shares)));
}

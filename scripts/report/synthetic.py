#!/usr/bin/env python3
"""Writes the run folders of a synthetic fleet gate or links run, figures drawn from a seeded
random generator with chosen nodes made bad, for `morphbench plot` to draw at a scale this
machine cannot run (hundreds of ranks). The CSVs follow the columns of a real run's.

  synthetic.py fleet DIR RANKS    # RANKS ranks, 4 to a host; 5 figures FAIL, 2 WARN, one rank silent
  synthetic.py links DIR RANKS    # a quick pattern's links; host 5's links slow
Prints the failed (or slow) nodes' names, one a line.
"""
import csv
import json
import os
import random
import sys

FLEET_COLUMNS = ("schema_version,run_id,bench,case,rank,host,local_rank,adapter,driver,test,"
                 "figure,value,expected,tolerance,unit,verdict,reason,retest_value,"
                 "others_cores,steal_pct,busy").split(",")
LINKS_COLUMNS = ("schema_version,run_id,bench,case,src_rank,dst_rank,src_host,dst_host,"
                 "transport,bytes,direction,n,mean_us,stddev_us,min_us,p50_us,p90_us,p99_us,"
                 "p999_us,max_us,cv,ci95_lo_us,ci95_hi_us,gbps,slowdown,flagged,intra_node,"
                 "verified,round,confirmed,hop_class,others_cores,steal_pct,busy").split(",")
ADAPTER = "synthetic H100 (written by scripts/report/synthetic.py)"
FIGURES = [("memcpy", "gbps", "GB/s", 1700.0), ("gemm", "gflops", "GFLOP/s", 51000.0),
           ("fma", "gflops", "GFLOP/s", 60000.0), ("d2h", "gbps", "GB/s", 25.0),
           ("h2d", "gbps", "GB/s", 26.0), ("bandwidth", "gbps", "GB/s", 3000.0)]


def meta(run_dir, run_id, bench, roster):
    doc = {"run_id": run_id, "tool": "morphbench", "tool_version": "synthetic",
           "git_revision": None, "command_line": ["scripts/report/synthetic.py", bench],
           "status": "complete", "error": None, "started_utc": "2026-12-04T00:00:00+00:00",
           "finished_utc": "2026-12-04T00:01:00+00:00",
           "host": {"hostname": roster[0]["hostname"]}, "adapter": None,
           "config": {"roster": roster}, "notes": {}}
    with open(os.path.join(run_dir, "meta.json"), "w") as f:
        json.dump(doc, f, indent=1)


def fleet(run_dir, ranks):
    rng = random.Random(200)
    run_id = "20261204T000000Z-synthetic"
    host = lambda r: f"node{r // 4:03d}"
    # (rank, test) -> (ratio to expected, verdict)
    bad = {(17, "gemm"): (0.41, "FAIL"), (88, "d2h"): (0.52, "FAIL"), (88, "h2d"): (0.55, "FAIL"),
           (140, "bandwidth"): (0.30, "FAIL"), (121, "fma"): (0.47, "FAIL"),
           (63, "gemm"): (0.86, "WARN"), (199, "memcpy"): (0.84, "WARN")}
    bad = {(r % ranks, t): v for (r, t), v in bad.items()}
    silent = 150 % ranks
    rows = []
    for r in range(ranks):
        base = dict(schema_version=1, run_id=run_id, bench="fleet", rank=r, host=host(r),
                    local_rank=r % 4, adapter=ADAPTER, driver="synthetic 1.0")
        if r == silent:
            rows.append(dict(base, case=f"r{r}_gate_status_0", test="gate", figure="status",
                             verdict="FAIL", reason=f"rank {r} went silent mid-gate",
                             busy="false"))
            continue
        for i, (test, figure, unit, expected) in enumerate(FIGURES):
            ratio, verdict = bad.get((r, test), (rng.lognormvariate(0.0, 0.03), "PASS"))
            rows.append(dict(base, case=f"r{r}_{test}_{figure}_{i}", test=test, figure=figure,
                             value=f"{expected * ratio:.4g}", expected=expected, tolerance=0.1,
                             unit=unit, verdict=verdict,
                             reason=f"synthetic: {ratio:.2f}x the expected level",
                             busy="false"))
    with open(os.path.join(run_dir, "fleet.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, FLEET_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    roster = [{"rank": r, "hostname": host(r), "adapter": ADAPTER} for r in range(ranks)]
    meta(run_dir, run_id, "fleet", roster)
    for r in sorted({r for r, _ in bad} | {silent}):
        print(f"r{r} {host(r)}")


def links(run_dir, ranks):
    rng = random.Random(128)
    run_id = "20261204T000000Z-synthetic"
    slow = 5 % ranks
    host = lambda r: f"host{r:03d}"
    # A quick pattern: a few rounds of disjoint pairs (random matchings), as `--pattern quick`.
    pairs = set()
    for _ in range(6):
        order = list(range(ranks))
        rng.shuffle(order)
        for a, b in zip(order[::2], order[1::2]):
            pairs.add((min(a, b), max(a, b)))
    rows = []
    for a, b in sorted(pairs):
        slowdown_of = lambda: rng.lognormvariate(0.0, 0.08) * (12.0 if slow in (a, b) else 1.0)
        for size, direction, p50 in ((8, "pingpong", 9.0), (4194304, "pingpong", 2100.0),
                                     (4194304, "oneway", 1400.0)):
            s = slowdown_of()
            t = p50 * s
            flagged = slow in (a, b) and s >= 1.5
            src, dst = (b, a) if direction == "oneway" and rng.random() < 0.5 else (a, b)
            rows.append(dict(
                schema_version=1, run_id=run_id, bench="links",
                case=f"r{src}-r{dst}_tcp_{size}_{direction}", src_rank=src, dst_rank=dst,
                src_host=host(src), dst_host=host(dst), transport="tcp", bytes=size,
                direction=direction, n=100, mean_us=f"{t:.3f}", stddev_us=f"{t * 0.05:.3f}",
                min_us=f"{t * 0.9:.3f}", p50_us=f"{t:.3f}", p90_us=f"{t * 1.1:.3f}",
                p99_us=f"{t * 1.3:.3f}", p999_us=f"{t * 1.5:.3f}", max_us=f"{t * 2:.3f}",
                cv=0.05, ci95_lo_us=f"{t * 0.98:.3f}", ci95_hi_us=f"{t * 1.02:.3f}",
                gbps=f"{size / (t * 1e3):.4f}" if direction == "oneway" else "",
                slowdown=f"{s:.3f}", flagged=str(flagged).lower(), intra_node="false",
                verified="true", round=1, confirmed=str(flagged).lower() if flagged else "",
                hop_class="", others_cores="0.0", steal_pct="0.0", busy="false"))
    with open(os.path.join(run_dir, "links.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, LINKS_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    meta(run_dir, run_id, "links", [{"rank": r, "hostname": host(r)} for r in range(ranks)])
    print(f"r{slow} {host(slow)}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("fleet", "links"):
        sys.exit(__doc__)
    kind, run_dir, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if not 8 <= ranks <= 4096:
        sys.exit(f"synthetic.py: {ranks} ranks: give 8 to 4096")
    os.makedirs(run_dir, exist_ok=True)
    (fleet if kind == "fleet" else links)(run_dir, ranks)

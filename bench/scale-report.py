#!/usr/bin/env python3
"""The tables of bench/run-scale, from its phase lines (one JSON object each).

  scale-report.py STORAGE PHASES CORES LOAD COMMIT OUT.json

Per instance count and phase, the median of the rounds of: operations per
second, latency (listing: the highest p50/p99 of the wrk processes, one per
instance), the cores each process group used (CPU seconds / seconds of the
phase) and what one operation cost (statements, CPU ms). Then the cost per
operation as the median of every run of that phase, whatever the count: the
figures a capacity model multiplies.
"""
import json, statistics, sys, time

storage = json.load(open(sys.argv[1]))
path, cores, load, commit, out = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
phases = [json.loads(l) for l in open(path)]
med = statistics.median
GROUPS = ("sgw", "postgres", "redis", "generator", "fake")
UNIT = {"ingest": "comment", "listing": "request", "publish": "target", "create": "post"}


def figures(p):
    f = {"ops_per_s": p["ops"] / p["seconds"]}
    if p["phase"] == "listing":
        f["ops_per_s"] = sum(w["requests"] / (w["duration_us"] / 1e6) for w in p["wrk"])
        f["p50_ms"] = max(w["latency_us"]["p50"] for w in p["wrk"]) / 1000
        f["p99_ms"] = max(w["latency_us"]["p99"] for w in p["wrk"]) / 1000
        f["errors"] = sum(sum(w["errors"].values()) for w in p["wrk"])
    for g in GROUPS:
        f["cores_" + g] = p["cpu_s"][g] / p["seconds"]
    f["cores_total"] = sum(f["cores_" + g] for g in GROUPS)
    # Everything else the machine ran meanwhile (other people's work, the kernel's
    # share not charged to a process, this script); idle is what nobody used.
    f["cores_other"] = max(p["cpu_s"]["machine"] / p["seconds"] - f["cores_total"], 0)
    f["cores_idle"] = max(cores - p["cpu_s"]["machine"] / p["seconds"], 0)
    ops = max(p["ops"], 1)
    f["statements_per_op"] = p["statements"]["calls"] / ops
    f["exec_ms_per_op"] = p["statements"]["exec_ms"] / ops
    for g in ("sgw", "postgres", "redis"):
        f["cpu_ms_" + g] = 1000 * p["cpu_s"][g] / ops
    f["cpu_ms_server"] = f["cpu_ms_sgw"] + f["cpu_ms_postgres"] + f["cpu_ms_redis"]
    return f


for p in phases:
    p["figures"] = figures(p)

by = {}
for p in phases:
    by.setdefault((p["phase"], p["instances"]), []).append(p["figures"])
summary = {"%s/%d" % k: {key: round(med(f[key] for f in fs), 4) for key in fs[0]} | {"rounds": len(fs)}
           for k, fs in sorted(by.items())}

print()
print("per instance count, median of the rounds (cores: CPU seconds per second of the phase, of %d;" % cores)
print("ours = sgw + pg + redis + gen + fake; other = the rest of the machine's use meanwhile; idle = unused)")
head = "%-8s %3s %9s %7s %7s | %5s %5s %5s %5s %5s %5s %5s %5s | %7s %7s %7s %7s %7s"
row = "%-8s %3d %9.0f %7s %7s | %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f | %7.2f %7.3f %7.3f %7.3f %7.3f"
print(head % ("phase", "n", "ops/s", "p50 ms", "p99 ms", "sgw", "pg", "redis", "gen", "fake", "ours", "other", "idle",
              "stmt/op", "sgw ms", "pg ms", "redis ms", "sum ms"))
for phase in ("ingest", "listing", "publish"):
    for n in sorted({p["instances"] for p in phases if p["phase"] == phase}):
        s = summary["%s/%d" % (phase, n)]
        lat = lambda k: "%.1f" % s[k] if k in s else "-"
        print(row % (phase, n, s["ops_per_s"], lat("p50_ms"), lat("p99_ms"),
                     *(s["cores_" + g] for g in GROUPS), s["cores_total"], s["cores_other"], s["cores_idle"],
                     s["statements_per_op"], s["cpu_ms_sgw"], s["cpu_ms_postgres"], s["cpu_ms_redis"], s["cpu_ms_server"]))
print("(ops: ingest = comments, in deliveries of 100; listing = requests; publish = targets)")

cost = {}
for phase in ("create", "ingest", "listing", "publish"):
    fs = [p["figures"] for p in phases if p["phase"] == phase]
    if fs:
        cost[phase] = {k: round(med(f[k] for f in fs), 4)
                       for k in ("statements_per_op", "exec_ms_per_op", "cpu_ms_sgw", "cpu_ms_postgres", "cpu_ms_redis", "cpu_ms_server")}
        cost[phase]["runs"] = len(fs)
print()
print("cost of one operation, median of every run of it")
print("%-28s %9s %8s %8s %9s %8s %5s" % ("operation", "stmts", "sgw ms", "pg ms", "redis ms", "sum ms", "runs"))
for phase, c in cost.items():
    print("%-28s %9.2f %8.3f %8.3f %9.3f %8.3f %5d" % ("%s (per %s)" % (phase, UNIT[phase]), c["statements_per_op"],
          c["cpu_ms_sgw"], c["cpu_ms_postgres"], c["cpu_ms_redis"], c["cpu_ms_server"], c["runs"]))
print("(%d cores; load average at the end: %s; commit %s)" % (cores, load, commit))
print()
print("most called statements per operation (first run of each, one instance; calls per op, execution ms per op)")
for phase in cost:
    p = next(p for p in phases if p["phase"] == phase)
    print("  %s (per %s): %.2f statements, %.3f ms executing" % (phase, UNIT[phase], p["figures"]["statements_per_op"],
          p["figures"]["exec_ms_per_op"]))
    for t in (p["statements"]["top"] or [])[:6]:
        print("    %7.2f %8.3f  %s" % (t["calls"] / max(p["ops"], 1), t["exec_ms"] / max(p["ops"], 1), t["query"][:90]))

print()
print("on disk at the end (table, indexes and TOAST)")
for t in storage:
    print("  %-26s %9d rows %10.1f MB %7.0f bytes a row" % (t["table"], t["rows"], t["bytes"] / 1e6, t["bytes"] / max(t["rows"], 1)))

errors = sum(p["figures"].get("errors", 0) for p in phases)
unpublished = sum(p["ops"] - p["published"] for p in phases if p["phase"] == "publish")
json.dump({"benchmark": "scale", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
           "machine": {"cores": cores, "load_average_at_end": load}, "summary": summary, "cost_per_op": cost, "storage": storage,
           "phases": phases}, open(out, "w"), indent=1)
if errors:
    sys.exit("%d listing requests failed: those figures do not measure the listing" % errors)
if unpublished:
    sys.exit("%d targets were not published" % unpublished)

# bench/stack.sh — sourced by bench/run-inbox, run-feed, run-comments-scale and
# run-scale: sgw on private throw-away PostgreSQL and Redis, companies with
# sandbox accounts, posts and comments written straight in SQL
# (bench/generate.sql), GET queries measured with wrk and their plans logged
# with auto_explain. The caller sets BENCH_NAME and cds to the
# repository root; everything started here is stopped on exit.
KEY="MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

say() { printf '==> %s\n' "$*"; }
die() { printf '%s: %s\n' "$BENCH_NAME" "$*" >&2; exit 1; }

[[ -x build/sgw ]] || die "build/sgw is missing: build first (cmake -S . -B build && cmake --build build)"
for tool in python3 wrk curl psql; do command -v "$tool" >/dev/null || die "$tool is not installed"; done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sgw-bench-$BENCH_NAME.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash spec/support/services stop "$tmp/services" --purge >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# start_stack [SGW ARGS...]: sets db, args (for the CLI and every instance),
# postmaster, pg_log, redis_pid, and starts the first instance (start_sgw).
# auto_explain is loaded into every session (it costs nothing while its
# log_min_duration is -1) so that the plans of sgw's own statements can be
# logged later without restarting anything. With PG_STATEMENTS=1
# pg_stat_statements is loaded too, which takes a restart of the server.
start_stack() {
  say "starting private PostgreSQL and Redis"
  local services=(bash spec/support/services start "$tmp/services" --database sgw_bench)
  "${services[@]}" >/dev/null
  set -a; . "$tmp/services/services.env"; set +a
  db=$SGW_TEST_DATABASE_URL
  if [[ ${PG_STATEMENTS:-0} == 1 ]]; then
    psql "$db" -XAtq -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null
    bash spec/support/services stop "$tmp/services" >/dev/null && "${services[@]}" >/dev/null
    set -a; . "$tmp/services/services.env"; set +a
    db=$SGW_TEST_DATABASE_URL
    psql "$db" -XAtq -c "CREATE EXTENSION pg_stat_statements" >/dev/null
  fi
  local pg_root
  pg_root=$(cat "$tmp/services/postgres.path" 2>/dev/null || echo "$tmp/services/postgres")
  pg_log=$pg_root/postgres.log
  postmaster=$(head -n 1 "$(psql "$db" -XAtq -c 'SHOW data_directory')/postmaster.pid")
  redis_pid=$(cat "$tmp/services/redis/redis.pid" 2>/dev/null || echo 0)
  psql "$db" -XAtq -c "ALTER DATABASE sgw_bench SET session_preload_libraries = 'auto_explain'" >/dev/null
  args=(--set "database.url=$db" --set "redis.url=$SGW_TEST_REDIS_URL" --set "crypto.encryption_key=$KEY"
        --set "api.rate_limit.per_minute=100000000" --set "log.requests=false" --set "log.level=warn" "$@")
  build/sgw migrate "${args[@]}" >/dev/null
  psql "$db" -XAtq -v ON_ERROR_STOP=1 -f bench/generate.sql >/dev/null
  start_sgw
}

# start_sgw: one more instance on the same database and Redis, on ports of its
# own; appends to sgw_pids and bases. The first one's are also sgw_pid, base.
sgw_pids=() bases=()
start_sgw() {
  local n=${#sgw_pids[@]} hport aport pid
  hport=$(free_port); aport=$(free_port)
  build/sgw serve "${args[@]}" --set "http.listen=127.0.0.1:$hport" --set "admin.listen=127.0.0.1:$aport" \
    --set "public_base_url=http://127.0.0.1:$hport" > "$tmp/sgw-$n.log" 2>&1 &
  pid=$!
  pids+=("$pid"); sgw_pids+=("$pid"); bases+=("http://127.0.0.1:$hport")
  sgw_pid=${sgw_pids[0]} base=${bases[0]}
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$aport/readyz" >/dev/null && return; sleep 0.1; done
  tail -n 20 "$tmp/sgw-$n.log" >&2
  die "sgw instance $((n + 1)) did not become ready"
}

# company NAME PLATFORMS...: a company, its test client (a limit it never
# reaches) and one sandbox account per platform given, in that order; sets
# company_id, client_id, apikey.
company() {
  local name=$1 platform n=0 client; shift
  company_id=$(build/sgw company create --name "$name" "${args[@]}" | field companyId)
  client=$(build/sgw client create --company "$company_id" --environment test --rate-limit 100000000 \
    --scopes "comments:read comments:write sandbox:write" "${args[@]}")
  client_id=$(printf '%s' "$client" | field clientId)
  apikey=$(printf '%s' "$client" | field apiKey)
  for platform in "$@"; do
    n=$((n + 1))
    curl -sf -H "X-Api-Key: $apikey" -H 'Content-Type: application/json' -X POST "$base/api/v1/sandbox/accounts" \
      -d "{\"platform\":\"$platform\",\"name\":\"$name account $n\"}" >/dev/null || die "creating a sandbox account failed"
  done
}

# posts COMPANY N: N published posts on each of the company's accounts, with
# their targets (ids pt_bench_<account>_<n>), in SQL.
posts() {
  # From standard input: psql does not put variables into a -c command.
  psql "$db" -XAtq -v ON_ERROR_STOP=1 -v company="$1" -v posts="$2" >/dev/null <<'SQL'
SELECT bench_posts(ARRAY[:'company'], :posts);
SQL
}

# position_cursor OFFSET ORDER WHERE [O]: the cursor of the comment at OFFSET
# in ORDER (SQL, e.g. "created_at DESC, id DESC") among the comments of WHERE,
# as the API gives it out (cursor.encode of sqltime.exact's time and the id;
# with "o": O when given, as the inbox's cursors hold their order).
position_cursor() {
  local at
  at=$(psql "$db" -XAtq -F ' ' -c "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), id
    FROM comments WHERE $3 ORDER BY $2 OFFSET $1 LIMIT 1")
  [[ -n $at ]] || die "no comment at offset $1 of $3"
  python3 -c 'import base64,json,sys
t, i, o = sys.argv[1:4]
p = {"t": t, "id": i}
if o: p["o"] = o
print(base64.urlsafe_b64encode(json.dumps(p, separators=(",", ":")).encode()).decode().rstrip("="))' $at "${4:-}"
}

# cpu_of [PID...]: CPU seconds used so far by the sgw instances, by
# PostgreSQL (the postmaster and every backend and helper it forked), by
# redis-server, by the processes given (with their threads) and by the whole
# machine (all cores, everyone's), in that order.
cpu_of() {
python3 - "${sgw_pids[*]}" "$postmaster" "${redis_pid:-0}" "$@" <<'PY'
import os, sys
hz = os.sysconf("SC_CLK_TCK")
def stat(pid):
    try: return open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError: return None
def ticks(f): return int(f[11]) + int(f[12]) if f else 0
def cpu(pids): return sum(ticks(stat(p)) for p in pids) / hz
pg = [p for p in filter(str.isdigit, os.listdir("/proc")) if (stat(p) or [0, 0])[1] == sys.argv[2]]
machine = list(map(int, open("/proc/stat").readline().split()[1:9]))
busy = sum(machine) - machine[3] - machine[4]
print("%.2f %.2f %.2f %.2f %.2f" % (cpu(sys.argv[1].split()), cpu(pg + [sys.argv[2]]), cpu([sys.argv[3]]), cpu(sys.argv[4:]), busy / hz))
PY
}

# with_cpu COMMAND...: runs it, then prints "CHILD_CPU <seconds>" (user +
# system of it and its children), so a load generator's own cost shows.
with_cpu() {
  python3 -c 'import resource,subprocess,sys; subprocess.run(sys.argv[1:]); u=resource.getrusage(resource.RUSAGE_CHILDREN); print("CHILD_CPU %.2f" % (u.ru_utime+u.ru_stime))' "$@"
}

# The queries of a GET bench: names[i] is measured as GET paths[i] with the
# API key keys[i] (unset: $apikey). Each must answer 200 with comments.
check_answers() {
  local i
  for i in "${!names[@]}"; do
    curl -s -H "X-Api-Key: ${keys[$i]:-$apikey}" "$base${paths[$i]}" > "$tmp/answer.json" || die "${names[$i]}: no answer"
    python3 - "${names[$i]}" "$tmp/answer.json" <<'PY' || die "${names[$i]} answered no comments (above)"
import json, sys
a = json.load(open(sys.argv[2]))
if not isinstance(a.get("data"), list) or not a["data"]:
    print(sys.argv[1], json.dumps(a)[:500], file=sys.stderr); sys.exit(1)
PY
  done
}

# measure I SECONDS: one wrk run of query I; appends a JSON line to $tmp/runs
# with wrk's summary and the share of the machine's CPU that wrk, sgw and
# PostgreSQL's backends used meanwhile.
measure() {
  local before after
  before=$(cpu_of)
  with_cpu wrk -t"$BENCH_THREADS" -c"$BENCH_CONNECTIONS" -d"${2}s" -s bench/wrk-get.lua \
    -H "X-Api-Key: ${keys[$1]:-$apikey}" "$base${paths[$1]}" > "$tmp/wrk.out" 2>&1
  after=$(cpu_of)
  python3 - "${names[$1]}" "$2" "$(nproc)" "$before" "$after" "$tmp/wrk.out" >> "$tmp/runs" <<'PY' || { cat "$tmp/wrk.out" >&2; die "wrk gave no summary for ${names[$1]}"; }
import json, sys
name, secs, cores = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
b, a = [list(map(float, s.split())) for s in sys.argv[4:6]]
out = open(sys.argv[6]).read().splitlines()
w = json.loads([l for l in out if l.startswith("WRK_JSON ")][-1][9:])
wcpu = float([l for l in out if l.startswith("CHILD_CPU ")][-1].split()[1])
machine = secs * cores
print(json.dumps({"query": name, "wrk": w, "cpu_share": {"wrk": round(wcpu / machine, 3),
    "sgw": round((a[0] - b[0]) / machine, 3), "postgres": round((a[1] - b[1]) / machine, 3)}}))
PY
}

# measure_rounds: a 1 s warm-up of each query, then ROUNDS rounds of
# BENCH_DURATION s per query, taking turns, so that every query sees the
# machine's changing load alike.
measure_rounds() {
  local i round
  say "warm-up: 1 s per query"
  for i in "${!names[@]}"; do measure "$i" 1; done
  : > "$tmp/runs"
  for round in $(seq "$ROUNDS"); do
    say "round $round of $ROUNDS: ${BENCH_DURATION} s per query, $BENCH_CONNECTIONS connections"
    for i in "${!names[@]}"; do measure "$i" "$BENCH_DURATION"; done
  done
}

# capture_plans: the plan PostgreSQL ran for one request of each query
# (auto_explain with ANALYZE and BUFFERS), into $tmp/plans: the statement
# that reads "FROM comments c" and holds marks[i] (a piece of its SQL that
# tells it from the handler's other statements).
capture_plans() {
  local i found offset
  say "plans: auto_explain (ANALYZE, BUFFERS) of one request per query"
  psql "$db" -XAtq -c "LOAD 'auto_explain'" -c "ALTER SYSTEM SET auto_explain.log_analyze = on" \
    -c "ALTER SYSTEM SET auto_explain.log_buffers = on" -c "ALTER SYSTEM SET auto_explain.log_min_duration = 0" \
    -c "SELECT pg_reload_conf()" >/dev/null
  : > "$tmp/plans"
  for i in "${!names[@]}"; do
    # A backend rereads its configuration between statements: ask until the
    # plan of the statement shows up in the log.
    found=""
    for _ in $(seq 50); do
      offset=$(stat -c %s "$pg_log")
      curl -sf -o /dev/null -H "X-Api-Key: ${keys[$i]:-$apikey}" "$base${paths[$i]}"
      if python3 - "$pg_log" "$offset" "${names[$i]}" "${paths[$i]}" "${marks[$i]}" >> "$tmp/plans" <<'PY'
import re, sys
log = open(sys.argv[1], errors="replace"); log.seek(int(sys.argv[2])); text = log.read()
entries = re.split(r"\n(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", text)
plans = [e for e in entries if "plan:" in e and "FROM comments c" in e and sys.argv[5] in e]
if not plans: sys.exit(1)
print("== %s: GET %s\n%s\n" % (sys.argv[3], sys.argv[4], plans[-1].split("plan:", 1)[1].rstrip()))
PY
      then found=1; break; fi
    done
    [[ -n $found ]] || say "warning: no plan logged for ${names[$i]}"
  done
  psql "$db" -XAtq -c "ALTER SYSTEM RESET auto_explain.log_min_duration" -c "SELECT pg_reload_conf()" >/dev/null
}

# summarize NAME GOAL_MS EXTRA_JSON: prints per query the median of the
# rounds of p50, p99 and requests/s, the CPU shares, and how many of the
# comments table's partitions its plan read; writes bench/out/NAME.json
# (EXTRA_JSON's fields added) and bench/out/NAME-plans.txt.
summarize() {
  mkdir -p bench/out
  cp "$tmp/plans" "bench/out/$1-plans.txt"
  python3 - "$tmp/runs" "$tmp/plans" "$1" "$2" "$3" "$ROUNDS" "$BENCH_DURATION" "$BENCH_CONNECTIONS" "$BENCH_THREADS" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(nproc)" "${names[@]}" <<'PY'
import json, re, statistics, sys, time
runs_file, plans_file, bench, goal, extra, rounds, secs, conns, threads, commit, cores = sys.argv[1:12]
names = sys.argv[12:]
runs = [json.loads(l) for l in open(runs_file)]
# Partitions a plan read: the comments_pNN it names (a pruned one is not named).
plans = {}
for block in open(plans_file).read().split("\n== "):
    head = block.lstrip("= ").split(":", 1)[0]
    plans[head] = sorted(set(re.findall(r"\bcomments_p\d\d\b", block)))
med = statistics.median
summary, misses = [], []
print("\n%-20s %9s %9s %11s %6s %6s %9s %7s %11s" % ("query", "p50 ms", "p99 ms", "requests/s", "wrk", "sgw",
      "postgres", "errors", "partitions"))
for n in names:
    rs = [r for r in runs if r["query"] == n]
    p50 = med(r["wrk"]["latency_us"]["p50"] for r in rs) / 1000
    p99 = med(r["wrk"]["latency_us"]["p99"] for r in rs) / 1000
    rps = med(r["wrk"]["requests_per_s"] for r in rs)
    share = {k: med(r["cpu_share"][k] for r in rs) for k in ("wrk", "sgw", "postgres")}
    errors = sum(sum(r["wrk"]["errors"].values()) for r in rs)
    parts = plans.get(n)
    print("%-20s %9.2f %9.2f %11.0f %5.0f%% %5.0f%% %8.0f%% %7d %11s" % (n, p50, p99, rps, share["wrk"] * 100,
          share["sgw"] * 100, share["postgres"] * 100, errors, "?" if parts is None else len(parts)))
    if p99 > float(goal): misses.append(n)
    summary.append({"query": n, "p50_ms": round(p50, 2), "p99_ms": round(p99, 2), "requests_per_s": round(rps),
                    "cpu_share_median": share, "errors": errors, "partitions_read": parts, "rounds": rs})
print("(median of %s rounds of %s s, %s connections; CPU share of the machine's %s cores; goal p99 <= %s ms%s)"
      % (rounds, secs, conns, cores, goal, "; missed by: " + ", ".join(misses) if misses else ": met by every query"))
print("plans: bench/out/%s-plans.txt" % bench)
out = {"benchmark": bench, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
       "machine": {"cores": int(cores)}, "rounds": int(rounds), "duration_s": float(secs), "connections": int(conns),
       "threads": int(threads), "goal_p99_ms": float(goal), "queries": summary}
out.update(json.loads(extra))
json.dump(out, open("bench/out/%s.json" % bench, "w"), indent=1)
PY
}

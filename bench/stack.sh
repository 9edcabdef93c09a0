# bench/stack.sh — sourced by bench/run-inbox, run-feed and run-scale: sgw on
# private throw-away PostgreSQL and Redis, companies with sandbox accounts,
# posts written straight in SQL. The caller sets BENCH_NAME and cds to the
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

# posts COMPANY CLIENT N: N published posts on each of the company's
# accounts, with their targets (ids pt_bench_<account>_<n>), in SQL.
posts() {
psql "$db" -XAtq -v ON_ERROR_STOP=1 -v company="$1" -v client="$2" -v posts="$3" >/dev/null <<'SQL'
INSERT INTO posts (id, company_id, environment, client_id, status, content, publishing, operation_id, created_at)
  SELECT 'post_bench_' || a.id || '_' || p, :'company', 'test', :'client', 'published',
         '{"type":"text","message":"Bench post"}', '{"mode":"immediate"}', 'op_bench', now() - interval '400 days'
    FROM social_accounts a, generate_series(1, :posts) p WHERE a.company_id = :'company';
INSERT INTO post_targets (id, post_id, company_id, environment, social_account_id, platform, position, status,
                          platform_post_id, published_at)
  SELECT 'pt_bench_' || a.id || '_' || p, 'post_bench_' || a.id || '_' || p, :'company', 'test', a.id,
         a.platform, 0, 'published', a.platform_account_id || '_' || (900000 + p), now() - interval '400 days'
    FROM social_accounts a, generate_series(1, :posts) p WHERE a.company_id = :'company';
SQL
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

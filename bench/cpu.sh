# bench/cpu.sh — sourced by bench scripts: the CPU time processes have used
# so far, read from /proc, to print a phase's cost per operation. pg_cpu_ms
# needs $pg_data (the private PostgreSQL's data directory).

# python3 and psql, resolved once, since the scripts run them many times,
# some while a phase is measured: a version manager's shim (pyenv) takes ten
# times as long to start as the interpreter it leads to (0.3 s against
# 0.03 s a call), and Debian's psql is a Perl wrapper around the client
# (twice its cost). Both would take CPU from what is measured.
PYTHON3=$(command python3 -c 'import sys; print(sys.executable)' 2>/dev/null || command -v python3 || true)
python3() { "$PYTHON3" "$@"; }
PSQL=$(ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1 || true)
[[ -n $PSQL ]] || PSQL=$(command -v psql || true)
psql() { "$PSQL" "$@"; }

# self_cpu_ms: the CPU this script and the children it has waited for have
# used so far, in ms: read before and after a phase, the bench's own share.
self_cpu_ms() {
  echo $(( $(awk '{print $14 + $15 + $16 + $17}' "/proc/$$/stat") * 1000 / $(getconf CLK_TCK) ))
}

# pg_cpu_ms: the CPU PostgreSQL's processes have used so far, in ms: its live
# processes' user and system time, plus the postmaster's own and its ended
# children's (reaped, so counted there). Read before and after a phase, it is
# PostgreSQL's cost of that phase, whichever client caused it.
pg_cpu_ms() {
  local pm ticks=0 hz
  pm=$(head -n 1 "$pg_data/postmaster.pid")
  hz=$(getconf CLK_TCK)
  for p in $(pgrep -P "$pm"); do
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  ticks=$((ticks + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")))
  echo $((ticks * 1000 / hz))
}

# proc_cpu_ms PID: the CPU a process has used so far, in ms (all its threads).
proc_cpu_ms() {
  echo $(( $(awk '{print $14 + $15}' "/proc/$1/stat") * 1000 / $(getconf CLK_TCK) ))
}

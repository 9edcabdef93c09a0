# bench/cpu.sh — sourced by bench scripts: the CPU time processes have used
# so far, read from /proc, to print a phase's cost per operation. pg_cpu_ms
# needs $pg_data (the private PostgreSQL's data directory).

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

-- wrk script of bench/run-http: sends the echo request on every connection
-- (keep-alive) and, at the end, prints one machine-readable line
--   WRK_JSON {...}
-- with the totals and the latency percentiles (microseconds).
wrk.method = "POST"
wrk.body = '{"message":"hello","n":42}'
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"requests_per_s":%.1f,"bytes":%d,' ..
    '"latency_us":{"mean":%.1f,"stdev":%.1f,"p50":%d,"p90":%d,"p99":%d,"max":%d},' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d,"non_2xx_3xx":%d}}\n',
    summary.requests, summary.duration, summary.requests / secs, summary.bytes,
    latency.mean, latency.stdev, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.timeout, e.status))
end

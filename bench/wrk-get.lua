-- wrk script of bench/run-auth: a plain GET on every connection (keep-alive;
-- headers such as X-Api-Key come from wrk -H) and, at the end, the same
--   WRK_JSON {...}
-- summary line as bench/wrk-post-json.lua (latency in microseconds).
wrk.method = "GET"

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

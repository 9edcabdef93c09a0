-- GET /bench/wait — the handler of bench/run-wait (routed only when
-- bench.enabled is true): one outbound call to bench.wait_url, a server that
-- answers after a fixed delay, so that the benchmark measures how many
-- waiting requests one instance keeps at once.
return function()
  local res, err = http.request({ url = config.get("bench.wait_url"), timeout = 30 })
  if not res then return 502, { error = err } end
  return 200, { status = res.status }
end

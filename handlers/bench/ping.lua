-- GET /bench/ping and GET /bench/ping-auth — the trivial handler of
-- bench/run-auth (routed only when bench.enabled is true). It does nothing, so
-- the difference between the two routes is what authentication and the rate
-- limit cost per request.
return function()
  return 200, { ok = true }
end

-- Every endpoint of the gateway: method, path, handler module (under
-- handlers/), the scope it needs, and its body rules. The host matches these;
-- adding an endpoint needs no C.
local routes = {
  { method = "GET", path = "/api/v1/openapi.json", handler = "api/openapi", auth = false },
}

-- Benchmark-only echo (bench/); off unless bench.enabled.
if config.get("bench.enabled") then
  routes[#routes + 1] = { method = "POST", path = "/bench/echo", handler = "bench/echo", auth = false }
end

return routes

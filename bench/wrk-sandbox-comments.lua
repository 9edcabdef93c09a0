-- wrk script of bench/run-feed: every request posts a new sandbox comment
-- (POST /api/v1/sandbox/comments; X-Api-Key from wrk -H) on the next of the
-- post targets in BENCH_TARGET_IDS (space-separated), and at the end the
-- WRK_JSON summary line of bench/wrk-get.lua.
dofile("bench/wrk-get.lua")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local targets, n = {}, 0
for id in (os.getenv("BENCH_TARGET_IDS") or ""):gmatch("%S+") do targets[#targets + 1] = id end
assert(#targets > 0, "BENCH_TARGET_IDS names no post target")

function request()
  n = n + 1
  local body = string.format('{"postTargetId":"%s","text":"Feed bench comment %d, a few words long.","authorName":"Bench %d"}',
    targets[n % #targets + 1], n, n % 97)
  return wrk.format("POST", "/api/v1/sandbox/comments", nil, body)
end

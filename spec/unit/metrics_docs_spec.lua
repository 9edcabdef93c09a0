-- docs/metrics.md lists every series sgw writes, and nothing it no longer
-- writes: an operator's dashboard is built from that page.

local function lines_of(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

-- Every metric name the code writes, with where: the C host's
-- metrics_count/metrics_gauge calls and metrics.c's own series, and the Lua
-- code's metrics.inc/metrics.set.
local function written()
  local names = {}
  local function add(name, where) names[name] = names[name] or where end
  for _, line in ipairs(lines_of([[grep -rnoE 'metrics_(count|gauge)\("sgw_[a-z0-9_]+"' host]])) do
    add(line:match('"(sgw_[a-z0-9_]+)"'), line:match("^[^:]+:%d+"))
  end
  for _, line in ipairs(lines_of([[grep -noE '#define [A-Z_]+ +"sgw_[a-z0-9_]+"' host/metrics.c]])) do
    add(line:match('"(sgw_[a-z0-9_]+)"'), "host/metrics.c:" .. line:match("^(%d+)"))
  end
  for _, line in ipairs(lines_of([[grep -rnoE "metrics\.(inc|set)\(['\"]sgw_[a-z0-9_]+" lib handlers]])) do
    add(line:match("(sgw_[a-z0-9_]+)$"), line:match("^[^:]+:%d+"))
  end
  return names
end

local function documented()
  local names = {}
  for line in assert(io.open("docs/metrics.md")):lines() do
    local name = line:match("^| `(sgw_[a-z0-9_]+)` |")
    if name then names[name] = true end
  end
  return names
end

describe("docs/metrics.md", function()
  it("finds the series the code writes (the scan itself works)", function()
    local names = written()
    -- One of each origin: the host's own, metrics.c's, and Lua's.
    assert.is_truthy(names.sgw_jobs_total)
    assert.is_truthy(names.sgw_http_requests_total)
    assert.is_truthy(names.sgw_webhook_deliveries_total)
  end)

  it("names every metric Lua writes literally, so that this check sees it", function()
    local dynamic = lines_of([[grep -rnE "metrics\.(inc|set)\(" lib handlers | grep -vE "metrics\.(inc|set)\(['\"]sgw_"]])
    assert.are.same({}, dynamic)
  end)

  it("lists every series the code writes", function()
    local docs, missing = documented(), {}
    for name, where in pairs(written()) do
      if not docs[name] then missing[#missing + 1] = name .. " (" .. where .. ")" end
    end
    table.sort(missing)
    assert.are.same({}, missing)
  end)

  it("lists nothing the code no longer writes", function()
    local code, stale = written(), {}
    for name in pairs(documented()) do
      if not code[name] then stale[#stale + 1] = name end
    end
    table.sort(stale)
    assert.are.same({}, stale)
  end)
end)

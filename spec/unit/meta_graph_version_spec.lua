-- lib/meta_graph_version.lua: the configured Graph API version on /metrics,
-- and a warning from 90 days before its end, after it, or when unknown.
local fake_host = require "fake_host"

local DAY = 86400
local V25_ENDS = 1848441600 + DAY -- the end of 2028-07-29 (UTC)

describe("meta_graph_version.announce", function()
  local config, warnings, gauges, version

  before_each(function()
    config = fake_host.install()
    warnings, gauges = {}, {}
    _G.log.warn = function(event, fields) warnings[#warnings + 1] = { event = event, fields = fields } end
    _G.metrics.set = function(name, labels, value) gauges[#gauges + 1] = { name = name, labels = labels, value = value } end
    package.loaded["meta_graph_version"] = nil
    version = require "meta_graph_version"
  end)

  local function at(base_url, now)
    config["meta.graph_base_url"] = base_url
    clock.set(now)
    return version.announce()
  end

  it("pins v25.0 by default and says nothing while its end is far", function()
    at(config["meta.graph_base_url"], V25_ENDS - 91 * DAY)
    assert.are.same({}, warnings)
    assert.are.same({ name = "sgw_meta_graph_version_info", labels = { version = "v25.0", ends = "2028-07-29" }, value = 1 },
      gauges[1])
  end)

  it("warns within 90 days of the end, and once it has ended", function()
    at("https://graph.facebook.com/v25.0", V25_ENDS - 89 * DAY)
    assert.are.equal("meta_graph_version_ending", warnings[1].event)
    assert.are.equal(89, warnings[1].fields.days_left)
    at("https://graph.facebook.com/v25.0/", V25_ENDS + 1)
    assert.are.equal("meta_graph_version_ended", warnings[2].event)
  end)

  it("warns about a version it does not know, and not about the newest one", function()
    at("https://graph.facebook.com/v99.0", V25_ENDS)
    assert.are.equal("meta_graph_version_unknown", warnings[1].event)
    assert.are.same({ version = "v99.0", ends = "unknown" }, gauges[1].labels)
    at("https://graph.facebook.com", V25_ENDS)
    assert.are.equal("unknown", gauges[2].labels.version)
    at("https://graph.facebook.com/v26.0", V25_ENDS)
    assert.are.equal(2, #warnings)
    assert.are.same({ version = "v26.0", ends = "" }, gauges[3].labels)
  end)
end)

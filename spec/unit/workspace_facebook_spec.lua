-- lib/workspace/facebook.lua: which permissions Connect with Facebook asks
-- for, and which of them a person declined (Meta's /me/permissions through
-- a scripted Graph).
local fake_host = require "fake_host"
local graph = require "scripted_graph"

local function load(overrides)
  fake_host.install(overrides)
  graph.install({ strip_token = true })
  package.loaded["workspace.facebook"] = nil
  return require "workspace.facebook"
end

local function has(list, name)
  for _, v in ipairs(list) do if v == name then return true end end
  return false
end

local function granted_all_but(facebook, missing)
  local data = {}
  for _, p in ipairs(facebook.PERMISSIONS) do
    if p ~= missing then data[#data + 1] = { permission = p, status = "granted" } end
  end
  graph.on("GET me/permissions", graph.ok({ data = data }))
end

describe("Connect with Facebook permissions", function()
  it("asks for ads_read only when meta.request_ads_read is on", function()
    local facebook = load({ ["meta.graph_base_url"] = graph.BASE })
    assert.is_false(has(facebook.permissions(), "ads_read"))
    assert.is_true(has(facebook.permissions(), "business_management"))
    facebook = load({ ["meta.graph_base_url"] = graph.BASE, ["meta.request_ads_read"] = true })
    assert.is_true(has(facebook.permissions(), "ads_read"))
    assert.are.equal(#facebook.PERMISSIONS + 1, #facebook.permissions(), "the list itself is not changed")
  end)

  it("names as declined only what it asked for and Meta did not grant", function()
    local facebook = load({ ["meta.graph_base_url"] = graph.BASE })
    granted_all_but(facebook, "pages_manage_posts")
    assert.are.same({ "pages_manage_posts" }, facebook.declined("EAAuser-token"))
    facebook = load({ ["meta.graph_base_url"] = graph.BASE, ["meta.request_ads_read"] = true })
    granted_all_but(facebook, nil)
    assert.are.same({ "ads_read" }, facebook.declined("EAAuser-token"))
  end)
end)

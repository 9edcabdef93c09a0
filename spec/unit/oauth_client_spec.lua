-- The client credentials of a token request and the client_id its rate
-- limit counts on (lib/oauth_client.lua).
local fake = require "fake_host"
fake.install()
local mime = require "mime"
crypto.base64_decode = function(s) return (mime.unb64(s)) end

local oauth_client = require "oauth_client"

local FORM = "application/x-www-form-urlencoded"
local ID = "cli_" .. string.rep("A", 24)

local function req(body, headers)
  headers = headers or {}
  headers["content-type"] = headers["content-type"] or FORM
  return { body = body, headers = headers }
end

describe("oauth_client", function()
  it("takes the id and secret from the form", function()
    local p = oauth_client.presented(req("grant_type=client_credentials&client_id=" .. ID .. "&client_secret=sgs_test_x"))
    assert.are.equal(ID, p.id)
    assert.are.equal("sgs_test_x", p.secret)
    assert.is_nil(p.basic)
  end)

  it("takes them from HTTP Basic, form-decoded after base64", function()
    local p = oauth_client.presented(req("grant_type=client_credentials",
      { authorization = "Basic " .. mime.b64(ID .. ":a%2Bb") }))
    assert.are.equal(ID, p.id)
    assert.are.equal("a+b", p.secret)
    assert.is_true(p.basic)
  end)

  it("reports what cannot be used, as RFC 6749 errors", function()
    assert.are.equal("invalid_request", oauth_client.presented(req("a=1", { ["content-type"] = "text/plain" })).code)
    assert.are.equal("invalid_request", oauth_client.presented(req("a=1&a=2")).code)
    local p = oauth_client.presented(req("grant_type=client_credentials", { authorization = "Basic !!!" }))
    assert.are.same({ 401, "invalid_client" }, { p.error, p.code })
    p = oauth_client.presented(req("grant_type=client_credentials", { authorization = "Bearer x" }))
    assert.are.same({ 401, "invalid_client" }, { p.error, p.code })
  end)

  it("counts the rate limit on a well-formed client_id only", function()
    assert.are.equal(ID, oauth_client.rate_id(req("client_id=" .. ID)))
    assert.is_nil(oauth_client.rate_id(req("client_id=nonsense")))
    assert.is_nil(oauth_client.rate_id(req("client_id=cli_" .. string.rep("a", 80))))
    assert.is_nil(oauth_client.rate_id(req("client_id=cli_a-b")))
    assert.is_nil(oauth_client.rate_id(req("grant_type=client_credentials")))
    assert.is_nil(oauth_client.rate_id(req("client_id=" .. ID, { ["content-type"] = "application/json" })))
  end)

  it("reads a request once", function()
    local r = req("client_id=" .. ID)
    assert.are.equal(oauth_client.presented(r), oauth_client.presented(r))
  end)
end)

-- lib/workspace/session.lua: the session token a browser's Cookie header
-- carries, read from any header anyone can send (before sign-in), in one
-- pass: a megabyte without '=' or ';' is read as fast as a short one (the
-- pattern it replaced, tried at every byte, took seconds for 16 KB).
require("fake_host").install()
local session = require "workspace.session"

local TOKEN = string.rep("A", 43)

local function token_of(cookie) return session.cookie_token({ headers = { cookie = cookie } }) end

describe("workspace session cookie", function()
  it("finds its token among other cookies", function()
    assert.are.equal(TOKEN, token_of("sgw_workspace=" .. TOKEN))
    assert.are.equal(TOKEN, token_of("theme=dark; sgw_workspace=" .. TOKEN .. "; lang=en"))
    assert.are.equal(TOKEN, token_of("theme=dark;sgw_workspace=" .. TOKEN))
    assert.is_nil(token_of(nil))
    assert.is_nil(token_of("theme=dark"))
    assert.is_nil(token_of("sgw_workspace=short"))
    assert.is_nil(token_of("sgw_workspace=" .. TOKEN:sub(2) .. "!"))
    assert.is_nil(token_of("x_sgw_workspace=" .. TOKEN))
  end)

  it("reads a megabyte of a header without '=' or ';' in one pass", function()
    local junk = string.rep("a", 1024 * 1024)
    assert.is_nil(token_of(junk))
    assert.are.equal(TOKEN, token_of(junk .. "; sgw_workspace=" .. TOKEN))
    assert.is_nil(token_of(string.rep(" a", 512 * 1024)))
  end)

  describe("behind https", function()
    local https_session

    setup(function()
      require("fake_host").install({ public_base_url = "https://sgw.example.com" })
      package.loaded["workspace.session"] = nil
      https_session = require "workspace.session"
    end)

    teardown(function()
      require("fake_host").install()
      package.loaded["workspace.session"] = nil
    end)

    it("is a __Host- cookie that a neighbouring subdomain cannot plant", function()
      assert.are.equal("__Host-sgw_workspace=" .. TOKEN .. "; Path=/; HttpOnly; SameSite=Lax; Max-Age="
        .. math.floor(config.get("workspace.session_hours") * 3600) .. "; Secure", https_session.cookie(TOKEN))
      assert.are.equal("__Host-sgw_workspace=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0; Secure", https_session.cookie(nil))
      local function read(cookie) return https_session.cookie_token({ headers = { cookie = cookie } }) end
      assert.are.equal(TOKEN, read("__Host-sgw_workspace=" .. TOKEN))
      -- The unprefixed name is what a subdomain could set for the parent domain.
      assert.is_nil(read("sgw_workspace=" .. TOKEN))
    end)
  end)

  it("is sgw_workspace on /workspace over plain http", function()
    assert.are.equal("sgw_workspace=; Path=/workspace; HttpOnly; SameSite=Lax; Max-Age=0", session.cookie(nil))
  end)
end)

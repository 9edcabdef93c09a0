-- lib/client_address.lua: the address a per-address limit counts on.
local client_address = require "client_address"

describe("client_address.group", function()
  it("counts an IPv6 client's /64 as one", function()
    local g = client_address.group
    assert.are.equal("2001:db8:1:2::/64", g("2001:db8:1:2::1"))
    assert.are.equal("2001:db8:1:2::/64", g("2001:0DB8:0001:0002:ffff:ffff:ffff:ffff"))
    assert.are.equal(g("2001:db8:1:2:aaaa::9"), g("2001:db8:1:2::"))
    assert.are_not.equal(g("2001:db8:1:2::1"), g("2001:db8:1:3::1"))
    assert.are.equal("0:0:0:0::/64", g("::1"))
    assert.are.equal("fe80:0:0:0::/64", g("fe80::1%eth0"))
    assert.are.equal("2001:db8:0:0::/64", g("2001:db8::5:6:7:8"))
  end)

  it("keeps an IPv4 address its own, however it is written", function()
    local g = client_address.group
    assert.are.equal("203.0.113.7", g("203.0.113.7"))
    for _, spelt in ipairs({ "::ffff:203.0.113.7", "0:0:0:0:0:ffff:203.0.113.7", "0::ffff:203.0.113.7",
        "::FFFF:cb00:7107", "0:0:0:0:0:ffff:cb00:7107", "::203.0.113.7", "64:ff9b::203.0.113.7",
        "64:ff9b::cb00:7107" }) do
      assert.are.equal("203.0.113.7", g(spelt), spelt)
    end
    assert.are_not.equal(g("::ffff:203.0.113.7"), g("::ffff:203.0.113.8"))
  end)

  it("returns anything that is no address as given, never raising", function()
    local g = client_address.group
    for _, junk in ipairs({ "not:an:address", ":::", "1:2:3:4:5:6:7:8:9", "1::2::3", "::ffff:999.0.0.1",
        "12345::1", "::ffff:1.2.3", "", ":" }) do
      local ok, got = pcall(g, junk)
      assert.is_true(ok, junk)
      if junk:find(":") then assert.are.equal(junk, got, junk) end
    end
    assert.is_nil(g(nil))
  end)
end)

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

  it("leaves IPv4 addresses, IPv4-mapped ones and anything else as they are", function()
    local g = client_address.group
    assert.are.equal("203.0.113.7", g("203.0.113.7"))
    assert.are.equal("203.0.113.7", g("::ffff:203.0.113.7"))
    assert.are.equal("not:an:address", g("not:an:address"))
    assert.is_nil(g(nil))
  end)
end)

-- The bench's fake Graph API (bench/fake-graph: nginx + Lua), which
-- bench/run-publish publishes against, keeps answering what sgw's publishing
-- relies on: its self-test starts it with two workers on a free port and
-- checks shapes, tokens, Facebook and Instagram publishing, records shared by
-- the workers and 400 calls waiting out their latency at once.
local stack = require "stack"

describe("bench fake Graph API", function()
  it("passes its self-test", function()
    local cmd = "SELF_TEST_PORT=" .. stack.free_port() .. " "
      .. stack.shell_quote(stack.repo_root() .. "/bench/fake-graph/self-test") .. " 2>&1"
    local p = assert(io.popen(cmd, "r"))
    local out = p:read("a")
    local ok = p:close()
    assert.is_true(ok == true, out)
    assert.truthy(out:match("\n%d+ passed, 0 failed\n?$"), out)
  end)
end)

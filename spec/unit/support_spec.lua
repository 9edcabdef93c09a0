-- The pure helpers of spec/support/stack.lua (no services needed).
local stack = require("stack")

describe("stack helpers", function()
  describe("shell_quote", function()
    it("leaves plain words alone", function()
      assert.equal("build/sgw", stack.shell_quote("build/sgw"))
      assert.equal("database.url=postgresql://postgres@127.0.0.1:5433/sgw",
        stack.shell_quote("database.url=postgresql://postgres@127.0.0.1:5433/sgw"))
    end)

    it("quotes anything the shell would interpret", function()
      assert.equal("'a b'", stack.shell_quote("a b"))
      assert.equal("'$HOME'", stack.shell_quote("$HOME"))
      assert.equal("'x?y&z'", stack.shell_quote("x?y&z"))
      assert.equal("''", stack.shell_quote(""))
    end)

    it("survives single quotes", function()
      local quoted = stack.shell_quote("it's")
      assert.equal("'it'\\''s'", quoted)
      local _, out = stack.sh("printf %s " .. quoted)
      assert.equal("it's", out)
    end)
  end)

  describe("sh", function()
    it("returns the exit code and the output", function()
      local code, out = stack.sh("echo out; echo err >&2; exit 3")
      assert.equal(3, code)
      assert.equal("out\nerr\n", out)
    end)
  end)

  describe("url_with_database", function()
    it("replaces the database of a URL", function()
      assert.equal("postgresql://postgres@127.0.0.1:5433/other",
        stack.url_with_database("postgresql://postgres@127.0.0.1:5433/sgw_test", "other"))
    end)

    it("keeps the query string", function()
      assert.equal("postgres://u:p@h/other?sslmode=disable",
        stack.url_with_database("postgres://u:p@h/db?sslmode=disable", "other"))
    end)

    it("adds a database to a URL without one", function()
      assert.equal("postgresql://h:1/other", stack.url_with_database("postgresql://h:1", "other"))
    end)

    it("handles keyword connection strings", function()
      assert.equal("host=h dbname=other port=1", stack.url_with_database("host=h dbname=db port=1", "other"))
      assert.equal("host=h dbname=other", stack.url_with_database("host=h", "other"))
    end)
  end)

  describe("unique_name", function()
    it("gives distinct identifier-safe names", function()
      local a, b = stack.unique_name("My Spec!"), stack.unique_name("My Spec!")
      assert.are_not.equal(a, b)
      assert.truthy(a:match("^my_spec_[%d_]+$"), a)
      assert.truthy(#a <= 63)
    end)
  end)

  describe("sgw_args", function()
    it("puts the config file first and opts.set last, in key order", function()
      local args = stack.sgw_args({ { "database.url", "postgresql://x/y" }, { "redis.url", "" } },
        { config = "my.conf", set = { ["log.level"] = "debug", ["clock.allow_control"] = true } })
      assert.same({
        "--config", "my.conf",
        "--set", "database.url=postgresql://x/y",
        "--set", "redis.url=",
        "--set", "clock.allow_control=true",
        "--set", "log.level=debug",
      }, args)
    end)
  end)

  describe("free_port", function()
    it("hands out distinct ports that can be bound", function()
      local socket = require("socket")
      local a, b = stack.free_port(), stack.free_port()
      assert.are_not.equal(a, b)
      local s = assert(socket.bind("127.0.0.1", a))
      s:close()
    end)
  end)

  describe("eventually", function()
    it("returns the first truthy value", function()
      local n = 0
      assert.equal("done", stack.eventually(function()
        n = n + 1
        return n >= 3 and "done"
      end, 5, 0.01))
    end)

    it("raises after the timeout", function()
      assert.has_error(function()
        stack.eventually(function() return false, "still false" end, 0.05, 0.01, "never")
      end)
    end)
  end)

  describe("services", function()
    it("explains what to do when the services are not there", function()
      if os.getenv("SGW_TEST_DATABASE_URL") then
        return -- running with services: nothing to explain
      end
      local ok, err = pcall(stack.services)
      assert.is_false(ok)
      assert.truthy(tostring(err):match("ctest"))
    end)
  end)
end)

-- Every global a Lua file of handlers/ or lib/ reads is one the host's
-- sandbox gives (host/luart.c, build_sandbox), and no file sets one: a
-- misspelt or forgotten `require` otherwise shows only when its line runs,
-- as a 500 on the path no test took. Read from the compiled code (luac's
-- listing), so strings and comments cannot hide or fake a use.

-- The sandbox's globals, read from luart.c itself: its base[] list, its
-- own[] functions, and os (a table it builds).
local function sandbox_globals()
  local src = assert(io.open("host/luart.c")):read("a")
  local names = { os = true }
  local base = assert(src:match("static const char %*base%[%] = (%b{})"), "base[] not found in host/luart.c")
  for name in base:gmatch('"([%w_]+)"') do names[name] = true end
  local own = assert(src:match("static const luaL_Reg own%[%] = (%b{})"), "own[] not found in host/luart.c")
  for name in own:gmatch('{ "([%w_]+)",') do names[name] = true end
  return names
end

local function lua_files()
  local files = {}
  local p = assert(io.popen("find lib handlers -name '*.lua' | sort"))
  for file in p:lines() do files[#files + 1] = file end
  p:close()
  return files
end

-- The globals file reads and sets, as { name, line } lists.
local function global_uses(file)
  local reads, sets = {}, {}
  local p = assert(io.popen("luac5.4 -p -l " .. file .. " 2>&1"))
  local listing = p:read("a")
  assert(p:close(), "luac5.4 cannot compile " .. file .. ": " .. listing)
  for line in listing:gmatch("[^\n]+") do
    local op = line:match("%s([GS]ETTABUP)%s")
    local name = op and line:match('; _ENV "([%w_]+)"')
    if name then
      local use = { name, line:match("%[(%d+)%]") }
      if op == "GETTABUP" then reads[#reads + 1] = use else sets[#sets + 1] = use end
    end
  end
  return reads, sets
end

-- Every file's uses, listed once for all the checks.
local uses
local function all_uses()
  if not uses then
    uses = {}
    for _, file in ipairs(lua_files()) do
      local reads, sets = global_uses(file)
      uses[#uses + 1] = { file = file, reads = reads, sets = sets }
    end
  end
  return uses
end

describe("the globals of handlers/ and lib/", function()
  local allowed = sandbox_globals()

  it("are read from the sandbox's list (the scan itself works)", function()
    for _, name in ipairs({ "require", "db", "redis", "string", "asset", "os" }) do
      assert.is_true(allowed[name], name)
    end
    assert.is_nil(allowed.io)
    -- The listing names globals as this spec expects.
    local reads = global_uses("handlers/workspace/clients.lua")
    assert.is_true(#reads > 0)
  end)

  it("are only those the sandbox gives", function()
    local bad = {}
    for _, f in ipairs(all_uses()) do
      for _, use in ipairs(f.reads) do
        if not allowed[use[1]] then bad[#bad + 1] = ("%s:%s reads %s"):format(f.file, use[2], use[1]) end
      end
    end
    assert.are.same({}, bad)
  end)

  it("are never set", function()
    local bad = {}
    for _, f in ipairs(all_uses()) do
      for _, use in ipairs(f.sets) do bad[#bad + 1] = ("%s:%s sets %s"):format(f.file, use[2], use[1]) end
    end
    assert.are.same({}, bad)
  end)
end)

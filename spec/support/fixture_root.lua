-- A private copy of handlers/ and lib/ plus the fixture handlers of
-- spec/fixtures/handlers/test and jobs of spec/fixtures/handlers/jobs, for
-- specs that edit handlers or need misbehaving ones without touching the
-- repository's own files.
local stack = require "stack"

local M = {}

local function q(s) return stack.shell_quote(s) end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

function M.write(path, text)
  local tmp = path .. ".tmp"
  local f = assert(io.open(tmp, "wb"))
  f:write(text)
  f:close()
  -- rename, so that a reload never reads half a file
  assert(os.rename(tmp, path))
end

-- Returns the directory to pass as lua.root.
function M.create(name)
  local root = stack.build_dir() .. "/test-roots/" .. stack.unique_name(name or "root")
  local repo = stack.repo_root()
  local code, out = stack.sh("mkdir -p " .. q(root) .. " && cp -r " .. q(repo .. "/handlers") .. " "
    .. q(repo .. "/lib") .. " " .. q(root) .. "/ && mkdir -p " .. q(root .. "/handlers/test")
    .. " && cp " .. q(repo .. "/spec/fixtures/handlers/test") .. "/*.lua " .. q(root .. "/handlers/test/")
    .. " && cp " .. q(repo .. "/spec/fixtures/handlers/jobs") .. "/*.lua " .. q(root .. "/handlers/jobs/"))
  assert(code == 0, out)
  local routes = read(root .. "/handlers/routes.lua")
  local patched, n = routes:gsub("\nreturn routes%s*$",
    "\nfor _, r in ipairs(require(\"handlers.test.routes\")) do routes[#routes + 1] = r end\nreturn routes\n")
  assert(n == 1, "handlers/routes.lua no longer ends with 'return routes'")
  M.write(root .. "/handlers/routes.lua", patched)
  return root
end

return M

-- Shared by the operator commands (handlers/cli/): flags, and the one-JSON-
-- object answer they all print.
local json = require "json"

local M = {}

-- {"create", "--name", "N", "--x=y"} -> positional list, flags table; or
-- nil and a message. known[name] = "switch" for a flag without a value
-- (flags[name] = "true").
function M.parse(args, known)
  local positional, flags = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local name, value = a:match("^%-%-([%w-]+)=(.*)$")
    if not name then name = a:match("^%-%-([%w-]+)$") end
    if name then
      if not known[name] then return nil, "unknown option --" .. name end
      if value == nil and known[name] == "switch" then
        value = "true"
      elseif value == nil then
        value = args[i + 1]
        if value == nil then return nil, "--" .. name .. " needs a value" end
        i = i + 1
      end
      flags[name] = value
    else
      positional[#positional + 1] = a
    end
    i = i + 1
  end
  return positional, flags
end

-- One table per command is both what parses its words and what --help
-- prints, so the two cannot disagree:
--   M.command{ name = "client", summary = "...", subcommands = {
--     { name = "create", summary = "...", about = "longer text, optional",
--       flags = { { "company", "ID", "the company it belongs to", required = true },
--                 { "name", "NAME", "what it is called", default = "Client <date>" },
--                 { "none", nil, "a switch: no value" } },
--       run = function(flags, console) ... end } } }
-- A command without subcommands has flags and run itself. The result is the
-- function handlers/cli/<name>.lua returns. --help or -h anywhere prints the
-- help of the command or subcommand named before it (exit 0, stdout); a bad
-- word gets one line naming it and the --help to read (exit 2, stderr).

local GLOBAL = "options every command takes: --config FILE, --set key=value (see sgw --help)"

local function flag_lines(flags)
  local lines, width = {}, 0
  for _, f in ipairs(flags) do
    f.usage = "--" .. f[1] .. (f[2] and (" " .. f[2]) or "")
    width = math.max(width, #f.usage)
  end
  for _, f in ipairs(flags) do
    local note = f.required and " (required)" or f.default and (" (default: " .. f.default .. ")") or ""
    lines[#lines + 1] = ("  %-" .. width .. "s  %s%s"):format(f.usage, f[3], note)
  end
  return lines
end

local function synopsis(prefix, flags)
  local words = { prefix }
  for _, f in ipairs(flags or {}) do
    local w = "--" .. f[1] .. (f[2] and (" " .. f[2]) or "")
    words[#words + 1] = f.required and w or ("[" .. w .. "]")
  end
  return table.concat(words, " ")
end

local function help_of(prefix, node)
  local out = { "usage: " .. synopsis(prefix, node.flags), "", node.about or node.summary }
  if node.flags and #node.flags > 0 then
    out[#out + 1] = ""
    out[#out + 1] = "options:"
    for _, l in ipairs(flag_lines(node.flags)) do out[#out + 1] = l end
  end
  if node.subcommands then
    out[1] = "usage: " .. prefix .. " <subcommand> [options]"
    out[#out + 1] = ""
    out[#out + 1] = "subcommands (sgw " .. node.name .. " <subcommand> --help for each):"
    for _, sub in ipairs(node.subcommands) do
      out[#out + 1] = ("  %-12s %s"):format(sub.name, sub.summary)
    end
  end
  out[#out + 1] = ""
  out[#out + 1] = GLOBAL
  return table.concat(out, "\n")
end

local function run_node(prefix, node, args, console)
  local known = {}
  for _, f in ipairs(node.flags or {}) do known[f[1]] = f[2] and true or "switch" end
  local pos, flags = M.parse(args, known)
  local hint = "; see " .. prefix .. " --help"
  if not pos then return 2, nil, prefix:sub(5) .. ": " .. flags .. hint end
  if #pos > 0 then return 2, nil, prefix:sub(5) .. ": unexpected argument '" .. pos[1] .. "'" .. hint end
  for _, f in ipairs(node.flags or {}) do
    if f.required and (flags[f[1]] == nil or flags[f[1]] == "") then
      return 2, nil, prefix:sub(5) .. ": --" .. f[1] .. " is required" .. hint
    end
  end
  return node.run(flags, console)
end

function M.command(spec)
  return function(args, console)
    local prefix = "sgw " .. spec.name
    local sub
    if spec.subcommands and args[1] and not args[1]:match("^%-") then
      for _, s in ipairs(spec.subcommands) do
        if s.name == args[1] then sub = s end
      end
      if not sub then
        return 2, nil, spec.name .. ": unknown subcommand '" .. args[1] .. "'; see " .. prefix .. " --help"
      end
      prefix = prefix .. " " .. sub.name
    end
    for _, a in ipairs(args) do
      if a == "--help" or a == "-h" then return 0, help_of(prefix, sub or spec) end
    end
    if spec.subcommands and not sub then
      return 2, nil, spec.name .. ": which subcommand? see " .. prefix .. " --help"
    end
    return run_node(prefix, sub or spec, table.move(args, sub and 2 or 1, #args, 1, {}), console)
  end
end

-- The keys of every command's answer in the order CONTRACT section 9 lists
-- them, merged into one list (any key not listed comes after, sorted).
local ANSWER = json.shape({ "companyId", "clientId", "accountId", "userId", "apiKey", "previousKeyExpiresAt",
  "keyPrefix", "clientSecret", "webhookUrl", "webhookSecret", "revokedAt", "subscriptions" })

function M.ok(value) return 0, json.encode(value, ANSWER) end

function M.fail(message, code) return code or 1, nil, message end

-- The database is required by every operator command.
function M.need_database()
  local rows, err = db.query("SELECT 1 AS one")
  if not rows then
    return nil, "cannot reach the database (" .. tostring(err) .. "); check database.url"
  end
  return true
end

return M

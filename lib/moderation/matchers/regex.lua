-- {"regex": "fr[e3]e\\s+money"}: holds when the pattern occurs in the text,
-- compared folded. Syntax and cost bound: lib/moderation/regex.lua and
-- docs/comments.md ("Regex").
local regex = require "moderation.regex"

local find = string.find

local M = {}

function M.validate(value)
  local match, err = regex.compile(value)
  if not match then return err end
  if regex.too_costly(value, match) then return "too costly to run on a long comment" end
end

-- Literals of several patterns often start alike ("money1", "money2"): one
-- find of their shared first bytes, mostly absent, answers for all of them.
local GATE_BYTES = 3

local function gates_of(values)
  local by_start, gates, known = {}, {}, {}
  for _, value in ipairs(values) do
    for _, lit in ipairs(regex.needs(value)) do
      if #lit > GATE_BYTES and not known[lit] then
        known[lit] = true
        local start = lit:sub(1, GATE_BYTES)
        local gate = by_start[start]
        if not gate then
          gate = { start = start, literals = {} }
          by_start[start] = gate
          gates[#gates + 1] = gate
        end
        gate.literals[#gate.literals + 1] = lit
      end
    end
  end
  local shared = {}
  for _, gate in ipairs(gates) do
    if #gate.literals > 1 then shared[#shared + 1] = gate end
  end
  return shared
end

-- The patterns of a set share their literal prefilter's finds on the comment
-- last asked about (several patterns often need the same word); first runs a
-- run of regex rules in one loop (see rules.compile).
function M.compile_set(values)
  local gates = gates_of(values)
  local last, seen
  local function fresh(comment)
    last, seen = comment, {}
    local folded = comment.folded
    for g = 1, #gates do
      local gate = gates[g]
      if not folded:find(gate.start, 1, true) then
        local literals = gate.literals
        for k = 1, #literals do seen[literals[k]] = false end
      end
    end
  end
  local matches, needs, tests = {}, {}, {}
  for i, value in ipairs(values) do
    local match = assert(regex.compile(value))
    matches[i], needs[i] = match, regex.needs(value)
    tests[i] = function(comment)
      if comment ~= last then fresh(comment) end
      return match(comment.folded, seen)
    end
  end
  local function first(comment, lo, hi)
    if comment ~= last then fresh(comment) end
    local folded = comment.folded
    for i = lo, hi do
      -- the pattern's literal prefilter, inline: most patterns end here
      local need = needs[i]
      local possible = #need == 0
      for k = 1, #need do
        local lit = need[k]
        local found = seen[lit]
        if found == nil then
          found = find(folded, lit, 1, true) ~= nil
          seen[lit] = found
        end
        if found then possible = true break end
      end
      if possible and matches[i](folded, seen) then return i end
    end
  end
  return tests, first
end

function M.compile(value)
  return M.compile_set({ value })[1]
end

return M

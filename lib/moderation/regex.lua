-- The regular expressions of moderation rules (docs/comments.md, "Regex"):
-- a small syntax compiled to a position automaton and run as a DFA built
-- while it reads, so matching takes time linear in the text whatever the
-- pattern: no backtracking, hence no pattern that takes a gateway down.
-- Patterns and texts are compared folded (lower case, no Latin diacritics).
local text_fold = require "text_fold"

local byte = string.byte

local M = {}

M.MAX_LENGTH = 500
M.MAX_POSITIONS = 64 -- one bit each in a Lua integer
M.MAX_REPEAT = 100
local MAX_STATES = 512 -- DFA states kept per pattern before the cache starts again

-- ---------------------------------------------------------------- syntax

local function set_of(from, to, into)
  into = into or {}
  for b = from, to do into[b] = true end
  return into
end
local function too_costly()
  error({ regex = true, message = "too costly: more than " .. M.MAX_POSITIONS
    .. " character positions (repetitions {n,m} count each copy)" }, 0)
end

-- Each node knows its weight w, the character positions it will take, so
-- that a tree past the limit is refused as it is built: the automaton
-- walks every copy of a repeated node, and a node of no weight repeated
-- within repetitions ("(?:(?:){60}){60}") was never refused, and cost a
-- walk of 60^depth nodes.
local function weighed(node)
  if node.w > M.MAX_POSITIONS then too_costly() end
  return node
end
local function cls(set) return { "cls", set, w = 1 } end
local function cat(a, b) return weighed({ "cat", a, b, w = a.w + b.w }) end
local function alt(a, b) return weighed({ "alt", a, b, w = a.w + b.w }) end
local function star(x) return { "star", x, w = x.w } end
local function opt(x) return { "opt", x, w = x.w } end
local EMPTY = { "empty", w = 0 }

-- One non-ASCII character of the (folded) text: a lead byte and its continuation bytes.
local MULTIBYTE = cat(cls(set_of(0xC2, 0xF4)), star(cls(set_of(0x80, 0xBF))))
local ASCII = set_of(0, 127)
local DIGIT = set_of(48, 57)
local WORD = set_of(97, 122, set_of(48, 57, { [95] = true }))
local SPACE = { [32] = true, [9] = true, [10] = true, [11] = true, [12] = true, [13] = true }

local function complement(set)
  local out = {}
  for b = 0, 127 do if not set[b] then out[b] = true end end
  return out
end
-- Any character not in an ASCII set: another ASCII byte or any non-ASCII character.
local function negated(set) return alt(cls(complement(set)), MULTIBYTE) end

local CLASS_ESCAPES = { d = DIGIT, w = WORD, s = SPACE }
local CONTROL = { n = 10, t = 9, r = 13, f = 12, v = 11 }

local function fail(pos, message) error({ regex = true, message = message .. " (at character " .. pos .. ")" }, 0) end

local function parse(pattern)
  local i, n = 1, #pattern
  local anchored_start, anchored_end = false, false
  local parse_alt

  local function peek() return pattern:sub(i, i) end

  -- An escape after the backslash at i - 1: a set (and whether it is negated).
  local function escape()
    local c = peek()
    if c == "" then fail(i, "a pattern cannot end with \\") end
    i = i + 1
    if CLASS_ESCAPES[c] then return CLASS_ESCAPES[c], false end
    if CLASS_ESCAPES[c:lower()] then
      -- \W: any non-word ASCII character (non-ASCII characters count as letters).
      return CLASS_ESCAPES[c:lower()], c ~= "W"
    end
    if CONTROL[c] then return { [CONTROL[c]] = true }, false end
    if c:match("^[%p ]$") then return { [c:byte()] = true }, false end
    fail(i - 1, "unknown escape \\" .. c)
  end

  local function class()
    local start = i - 1
    local negate = peek() == "^"
    if negate then i = i + 1 end
    local set, first = {}, true
    while true do
      local c = peek()
      if c == "" then fail(start, "unclosed [") end
      if c == "]" and not first then i = i + 1 break end
      first = false
      local lo
      if c == "\\" then
        i = i + 1
        local s, neg = escape()
        if neg then for b in pairs(complement(s)) do set[b] = true end
        else for b in pairs(s) do set[b] = true end end
      elseif c:byte() >= 0x80 then
        fail(i, "[...] takes ASCII characters only (accents are ignored anyway: write [e] for é)")
      else
        lo = c:lower():byte()
        i = i + 1
        if peek() == "-" and pattern:sub(i + 1, i + 1) ~= "]" and pattern:sub(i + 1, i + 1) ~= "" then
          local hi = pattern:sub(i + 1, i + 1)
          if hi == "\\" or hi:byte() >= 0x80 then fail(i + 1, "a range ends with a plain ASCII character") end
          if hi:byte() < c:byte() then fail(i, "range " .. c .. "-" .. hi .. " is backwards") end
          for b = c:byte(), hi:byte() do set[string.char(b):lower():byte()] = true end
          i = i + 2
        else
          set[lo] = true
        end
      end
    end
    if negate then return negated(set) end
    return cls(set)
  end

  -- A literal character at i (ASCII or a whole UTF-8 sequence), folded.
  local function literal()
    local len = 1
    local b = pattern:byte(i)
    if b >= 0xF0 then len = 4 elseif b >= 0xE0 then len = 3 elseif b >= 0xC0 then len = 2 end
    local folded = text_fold.fold(pattern:sub(i, i + len - 1))
    i = i + len
    local node
    for k = 1, #folded do
      local leaf = cls({ [folded:byte(k)] = true })
      node = node and cat(node, leaf) or leaf
    end
    return node
  end

  local function atom()
    local c = peek()
    if c == "(" then
      local open = i
      i = i + 1
      if pattern:sub(i, i + 1) == "?:" then i = i + 2
      elseif peek() == "?" then fail(i, "only (?:...) groups are supported") end
      local inner = parse_alt()
      if peek() ~= ")" then fail(open, "unclosed (") end
      i = i + 1
      return inner
    elseif c == "[" then
      i = i + 1
      return class()
    elseif c == "." then
      i = i + 1
      return alt(cls(ASCII), MULTIBYTE)
    elseif c == "\\" then
      i = i + 1
      local set, neg = escape()
      return neg and negated(set) or cls(set)
    elseif c == "^" then
      if i ~= 1 then fail(i, "^ is allowed only at the start of the pattern") end
      i = i + 1
      anchored_start = true
      return EMPTY
    elseif c == "$" then
      if i ~= n then fail(i, "$ is allowed only at the end of the pattern") end
      i = i + 1
      anchored_end = true
      return EMPTY
    elseif c:match("^[*+?{]$") then
      fail(i, "nothing to repeat before " .. c)
    end
    return literal()
  end

  local function bounds()
    local open = i
    local lo, comma, hi, close = pattern:match("^{(%d*)(,?)(%d*)()}", i)
    if not lo or lo == "" then fail(open, "{ starts a repetition {n}, {n,} or {n,m}") end
    lo = tonumber(lo)
    hi = comma == "" and lo or (hi ~= "" and tonumber(hi) or nil)
    if lo > M.MAX_REPEAT or (hi and hi > M.MAX_REPEAT) then fail(open, "repetitions go up to " .. M.MAX_REPEAT) end
    if hi and hi < lo then fail(open, "{n,m} needs n <= m") end
    i = close + 1
    return lo, hi
  end

  local function repeated()
    local node = atom()
    local q = peek()
    if q ~= "" and q:match("^[*+?{]$") and node.w == 0 then
      fail(i, "nothing to repeat before " .. q .. " (what comes before matches only the empty text)")
    end
    if q == "*" then i = i + 1 node = star(node)
    elseif q == "+" then i = i + 1 node = cat(node, star(node))
    elseif q == "?" then i = i + 1 node = opt(node)
    elseif q == "{" then
      local lo, hi = bounds()
      if node.w * (hi or lo + 1) > M.MAX_POSITIONS then too_costly() end
      local out = EMPTY
      for _ = 1, lo do out = cat(out, node) end
      if hi then
        for _ = lo + 1, hi do out = cat(out, opt(node)) end
      else
        out = cat(out, star(node))
      end
      node = out
    end
    if peek():match("^[*+?{]$") and peek() ~= "" then fail(i, "a repetition cannot repeat again") end
    return node
  end

  local function parse_cat()
    local node = EMPTY
    while i <= n and peek() ~= "|" and peek() ~= ")" do node = cat(node, repeated()) end
    return node
  end

  function parse_alt()
    local node = parse_cat()
    while peek() == "|" do
      i = i + 1
      node = alt(node, parse_cat())
    end
    return node
  end

  local tree = parse_alt()
  if i <= n then fail(i, "unmatched )") end
  return tree, anchored_start, anchored_end
end

-- ---------------------------------------------------------------- automaton

-- Glushkov's construction: one position per character class of the tree;
-- first/last: the positions a match can start/end at; follow[p]: those that
-- can come after p. Sets of positions are bits of an integer.
local function automaton(tree)
  local classes, follow = {}, {}
  local function bits(mask, fn)
    for p = 0, #classes - 1 do
      if mask & (1 << p) ~= 0 then fn(p) end
    end
  end
  local function walk(node)
    local kind = node[1]
    if kind == "cls" then
      if #classes >= M.MAX_POSITIONS then too_costly() end
      local p = #classes
      classes[p + 1], follow[p] = node[2], 0
      return false, 1 << p, 1 << p
    elseif kind == "empty" then
      return true, 0, 0
    elseif kind == "cat" then
      local an, af, al = walk(node[2])
      local bn, bf, bl = walk(node[3])
      bits(al, function(p) follow[p] = follow[p] | bf end)
      return an and bn, an and (af | bf) or af, bn and (al | bl) or bl
    elseif kind == "alt" then
      local an, af, al = walk(node[2])
      local bn, bf, bl = walk(node[3])
      return an or bn, af | bf, al | bl
    elseif kind == "star" then
      local _, f, l = walk(node[2])
      bits(l, function(p) follow[p] = follow[p] | f end)
      return true, f, l
    else -- opt
      local _, f, l = walk(node[2])
      return true, f, l
    end
  end
  local nullable, first, last = walk(tree)
  -- byte -> the positions whose class holds it
  local by_byte = {}
  for b = 0, 255 do
    local mask = 0
    for p, set in ipairs(classes) do
      if set[b] then mask = mask | (1 << (p - 1)) end
    end
    by_byte[b] = mask
  end
  return { nullable = nullable, first = first, last = last, follow = follow, by_byte = by_byte,
    positions = #classes, bits = bits }
end

-- A Lua pattern class of the bytes in mask's positions.
local function class_of(a, mask)
  local out = {}
  for b = 0, 255 do
    if a.by_byte[b] & mask ~= 0 then
      local c = string.char(b)
      out[#out + 1] = c:match("%w") and c or "%" .. c
    end
  end
  return "[" .. table.concat(out) .. "]"
end

-- A Lua pattern of the first two bytes a match can start with (the first
-- byte alone when a match can be one byte long), to skip to the next
-- candidate with one C-speed find.
local function start_pattern(a)
  if a.first & a.last ~= 0 then return class_of(a, a.first) end
  local second = 0
  a.bits(a.first, function(p) second = second | a.follow[p] end)
  return class_of(a, a.first) .. class_of(a, second)
end

-- ---------------------------------------------------------------- prefilter

-- Literals of which every match holds one: a few plain finds (C speed,
-- memchr) rule most comments out before the automaton reads a byte.
-- Per node: `exact`, the strings it matches when they are few and short
-- (small classes expanded: w[i1]n -> win, w1n), else `need`, a set one of
-- which occurs in anything it matches (nil: nothing known).
local MAX_STRINGS, MAX_CLASS, MAX_LITERAL = 16, 4, 16

local function count(set)
  local n = 0
  for _ in pairs(set) do n = n + 1 end
  return n
end

-- What a node's matches are known to contain: its exact strings or its need;
-- nil when that says nothing (the empty string is among them).
local function needed(info)
  local set = info.exact or info.need
  if not set or set[""] then return nil end
  return set
end

-- The more selective of two needs: longer shortest literal (up to 3 bytes,
-- past which a plain find is selective enough), then fewer finds.
local function score(set)
  if not set then return -math.huge end
  local shortest = math.huge
  for lit in pairs(set) do shortest = math.min(shortest, #lit) end
  return math.min(shortest, 3) * 100 - count(set)
end
local function better(a, b) return score(a) >= score(b) and a or b end

local function literals(node)
  local kind = node[1]
  if kind == "empty" then return { exact = { [""] = true } } end
  if kind == "cls" then
    if count(node[2]) > MAX_CLASS then return {} end
    local exact = {}
    for b in pairs(node[2]) do exact[string.char(b)] = true end
    return { exact = exact }
  end
  if kind == "star" then return {} end
  if kind == "opt" then
    local inner = literals(node[2])
    if not inner.exact or count(inner.exact) >= MAX_STRINGS then return {} end
    local exact = { [""] = true }
    for lit in pairs(inner.exact) do exact[lit] = true end
    return { exact = exact }
  end
  if kind == "alt" then
    local a, b = literals(node[2]), literals(node[3])
    if a.exact and b.exact and count(a.exact) + count(b.exact) <= MAX_STRINGS then
      local exact = {}
      for lit in pairs(a.exact) do exact[lit] = true end
      for lit in pairs(b.exact) do exact[lit] = true end
      return { exact = exact }
    end
    local na, nb = needed(a), needed(b)
    if not na or not nb then return {} end
    local need = {}
    for lit in pairs(na) do need[lit] = true end
    for lit in pairs(nb) do need[lit] = true end
    return { need = need }
  end
  -- cat: its parts in order (the tree leans left), runs of exact parts
  -- joined into longer literals while they stay few.
  local parts = {}
  local function flatten(n)
    if n[1] == "cat" then flatten(n[2]) flatten(n[3]) else parts[#parts + 1] = n end
  end
  flatten(node)
  local run, need, all_exact = { [""] = true }, nil, true
  for _, part in ipairs(parts) do
    local info = literals(part)
    local joined
    if info.exact and count(run) * count(info.exact) <= MAX_STRINGS then
      joined = {}
      for x in pairs(run) do
        for y in pairs(info.exact) do
          if #x + #y > MAX_LITERAL then joined = nil break end
          joined[x .. y] = true
        end
        if not joined then break end
      end
    end
    if joined then
      run = joined
    else
      all_exact = false
      need = better(need, needed({ exact = run }))
      if info.exact then
        run = info.exact
      else
        need = better(need, needed(info))
        run = { [""] = true }
      end
    end
  end
  if all_exact then return { exact = run } end
  return { need = better(need, needed({ exact = run })) }
end

-- ---------------------------------------------------------------- API

-- The literals of which every match holds one, longest first ({}: none known).
local function needs_of(tree)
  local list = {}
  for lit in pairs(needed(literals(tree)) or {}) do list[#list + 1] = lit end
  table.sort(list, function(x, y) return #x > #y or (#x == #y and x < y) end)
  return list
end

-- The same for a valid pattern, for callers that share finds among patterns.
function M.needs(pattern)
  local tree = parse(pattern)
  return needs_of(tree)
end

-- compile(pattern) -> match(folded_text[, seen]) -> bool, or nil and a message.
-- seen: a table kept by the caller for one text, in which patterns run on it
-- share their literal finds (literal -> whether the text has it).
-- plain: without the literal prefilter (the reference the specs compare with).
function M.compile(pattern, plain)
  if type(pattern) ~= "string" or pattern == "" then return nil, "must be a non-empty string" end
  local length = utf8.len(pattern)
  if not length then return nil, "must be valid UTF-8" end
  if length > M.MAX_LENGTH then return nil, "must be at most " .. M.MAX_LENGTH .. " characters" end
  local ok, tree, anchored_start, anchored_end = pcall(parse, pattern)
  local a
  if ok then ok, a = pcall(automaton, tree) else a = tree end
  if not ok then
    if type(a) == "table" and a.regex then return nil, a.message end
    error(a, 0)
  end
  if a.nullable then return nil, "matches the empty text, hence every comment" end
  local follow, by_byte, first, last = a.follow, a.by_byte, a.first, a.last
  local candidates = start_pattern(a)
  local need_list = plain and {} or needs_of(tree)
  local n_need = #need_list

  local trans, states = {}, 0
  -- The positions reached from state d (the positions just matched; -1:
  -- the start of an anchored pattern) by byte b.
  local function step(d, b)
    local reach = 0
    if d == -1 then
      reach = first
    else
      a.bits(d, function(p) reach = reach | follow[p] end)
      if not anchored_start then reach = reach | first end
    end
    return reach & by_byte[b]
  end

  return function(text, seen)
    if n_need > 0 then
      -- (inline, not a helper: this runs per pattern per comment)
      local k = 1
      while k <= n_need do
        local lit = need_list[k]
        local found
        if seen then found = seen[lit] end
        if found == nil then
          found = text:find(lit, 1, true) ~= nil
          if seen then seen[lit] = found end
        end
        if found then break end
        k = k + 1
      end
      if k > n_need then return false end
    end
    local d, i, n = anchored_start and -1 or 0, 1, #text
    while i <= n do
      if d == 0 then
        if anchored_start then return false end
        i = text:find(candidates, i)
        if not i then return false end
      end
      local row = trans[d]
      if not row then
        if states >= MAX_STATES then trans, states = {}, 0 end
        row = {}
        trans[d], states = row, states + 1
      end
      local b = byte(text, i)
      local nd = row[b]
      if not nd then
        nd = step(d, b)
        row[b] = nd
      end
      d = nd
      if not anchored_end and d & last ~= 0 then return true end
      i = i + 1
    end
    return anchored_end and d ~= -1 and d & last ~= 0
  end
end

-- The cost check of a saved pattern: its matcher over texts built from its
-- own characters, the longest a comment can be, must finish within budget.
M.CHECK_TEXT_BYTES = 8000
M.CHECK_BUDGET_SECONDS = 0.05

function M.too_costly(pattern, match)
  local chars = {}
  for _, c in utf8.codes(pattern) do chars[#chars + 1] = text_fold.fold(utf8.char(c)) end
  local texts = { table.concat(chars):rep(M.CHECK_TEXT_BYTES // math.max(#pattern, 1) + 1) }
  for k = 1, math.min(#chars, 8) do texts[#texts + 1] = chars[k]:rep(M.CHECK_TEXT_BYTES // #chars[k]) end
  local started = os.clock()
  for _, t in ipairs(texts) do
    match(t:sub(1, M.CHECK_TEXT_BYTES))
    if os.clock() - started > M.CHECK_BUDGET_SECONDS then return true end
  end
  return false
end

return M

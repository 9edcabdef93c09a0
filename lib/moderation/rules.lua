-- Moderation rules (docs/comments.md, "Rules"): a company's ordered list per
-- environment, checked, stored, compiled once per saved version, and run on
-- each new comment someone else wrote. The first enabled rule in scope whose
-- every match key holds acts: hide or delete as an ordinary moderation
-- operation, or flag (an event, no platform call).
local json = require "json"
local text_fold = require "text_fold"
local fields = require "fields"
local events = require "events"
local comments = require "comments"
local moderation = require "moderation"

local M = {}

M.MAX_RULES = 200
M.MAX_SCOPE_IDS = 100 -- socialAccountIds of one rule
M.ACTIONS = { hide = true, delete = true, flag = true }
M.PLATFORMS = { facebook = true, instagram = true }
local RULE_FIELDS = { id = true, name = true, enabled = true, match = true, scope = true, action = true }
local SCOPE_FIELDS = { socialAccountIds = true, platforms = true }

-- ---------------------------------------------------------------- matchers

-- A match key names a file of lib/moderation/matchers/ with validate(value)
-- -> nil | message[, pointer below the key] and compile(value) -> function(comment) -> bool,
-- and optionally compile_set(values) -> tests: the values of that key in every
-- rule of a set at once (tests[i] for values[i]), when the rules can share
-- work per comment (keywords: one index of all their words). `cheap = true`
-- marks a matcher that needs no prepared text: a rule tries those first, so
-- {"maxLength": 1, "keywords": [...]} folds no text it can rule out by length.
-- nil when there is no such file.
function M.matcher(key)
  if type(key) ~= "string" or not key:match("^%a%w*$") or #key > 40 then return nil end
  local name = "moderation.matchers." .. key
  local ok, m = pcall(require, name)
  if ok then return m end
  if tostring(m):find("module '" .. name .. "' not found", 1, true) then return nil end
  error(m, 0)
end

-- ---------------------------------------------------------------- checking

local function is_array(v)
  return type(v) == "table" and (next(v) == nil or json.is_array(v))
end

local function is_object(v)
  return type(v) == "table" and (next(v) == nil or not json.is_array(v))
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

local function pointer_part(key)
  return (tostring(key):gsub("~", "~0"):gsub("/", "~1"))
end

-- A list of at most `max` different strings (each passing ok), or nil;
-- errors at `at`.
local function check_list(value, at, add, ok, what, max)
  if value == nil or value == json.null then return end
  if not is_array(value) or #value == 0 then
    return add(at, "invalid_value", "Must be a non-empty array of " .. what .. ", or null for all.")
  end
  if #value > max then return add(at, "too_many", "At most " .. max .. " " .. what .. ".") end
  local seen = {}
  for j, v in ipairs(value) do
    if not ok(v) then
      add(at .. "/" .. (j - 1), "invalid_value", "Must be one of " .. what .. ".")
    elseif seen[v] then
      add(at .. "/" .. (j - 1), "invalid_value", v .. " is listed twice.")
    end
    seen[v] = true
  end
end

local function check_scope(scope, at, add)
  if scope == nil or scope == json.null then return end
  if not is_object(scope) then return add(at, "invalid_value", "scope must be an object or null.") end
  for _, k in ipairs(sorted_keys(scope)) do
    if not SCOPE_FIELDS[k] then add(at .. "/" .. pointer_part(k), "unknown_field", "Unknown field " .. k .. ".") end
  end
  check_list(scope.socialAccountIds, at .. "/socialAccountIds", add,
    function(v) return type(v) == "string" and v ~= "" and #v <= 64 end, "social account ids", M.MAX_SCOPE_IDS)
  check_list(scope.platforms, at .. "/platforms", add,
    function(v) return M.PLATFORMS[v] == true end, "facebook, instagram", 2)
end

local function check_match(match, at, add)
  if not is_object(match) or next(match) == nil then
    return add(at, match == nil and "required" or "invalid_value",
      "match is an object of one or more kinds (keywords, regex, links, emails, phones, authors, minLength, maxLength).")
  end
  for _, key in ipairs(sorted_keys(match)) do
    local here = at .. "/" .. pointer_part(key)
    local m = M.matcher(key)
    if not m then
      add(here, "unknown_field", "Unknown match kind " .. key .. ".")
    else
      local message, below = m.validate(match[key])
      if message then add(here .. (below or ""), "invalid_value", key .. ": " .. message .. ".") end
    end
  end
end

local function check_rule(rule, at, add, ids)
  if not is_object(rule) then return add(at, "invalid_value", "A rule is an object.") end
  for _, k in ipairs(sorted_keys(rule)) do
    if not RULE_FIELDS[k] then add(at .. "/" .. pointer_part(k), "unknown_field", "Unknown field " .. k .. ".") end
  end
  local id = rule.id
  if id ~= nil then
    local n = type(id) == "string" and utf8.len(id)
    if not n or n < 1 or n > 64 or id:find("%c") then
      add(at .. "/id", "invalid_value", "id is a string of 1 to 64 characters, no control characters.")
    elseif ids[id] then
      add(at .. "/id", "duplicate_id", "id " .. id .. " is also the id of rule " .. ids[id] .. ".")
    else
      ids[id] = at
    end
  end
  local name = rule.name
  if name ~= nil and name ~= json.null then
    local n = type(name) == "string" and utf8.len(name)
    if not n then add(at .. "/name", "invalid_value", "name is a string or null.")
    elseif n > 200 then add(at .. "/name", "too_long", "name must be at most 200 characters.") end
  end
  if rule.enabled ~= nil and type(rule.enabled) ~= "boolean" then
    add(at .. "/enabled", "invalid_value", "enabled is true or false.")
  end
  if rule.action == nil then
    add(at .. "/action", "required", "action is required: hide, delete or flag.")
  elseif not M.ACTIONS[rule.action] then
    add(at .. "/action", "invalid_value", "action must be one of delete, flag, hide.")
  end
  check_match(rule.match, at .. "/match", add)
  check_scope(rule.scope, at .. "/scope", add)
end

-- The body of a PUT: the rules as stored (every field filled in, ids made
-- for rules without one), or nil and every problem (errors[] entries).
function M.check(body)
  local errors = {}
  local function add(field, code, message)
    errors[#errors + 1] = { field = field, code = code, message = message }
  end
  if not is_object(body) then
    return nil, { { field = "", code = "invalid_value", message = "The body must be a JSON object." } }
  end
  for _, k in ipairs(sorted_keys(body)) do
    if k ~= "rules" then add("/" .. pointer_part(k), "unknown_field", "Unknown field " .. k .. ".") end
  end
  local rules = body.rules
  if rules == nil then
    add("/rules", "required", "rules is required (an empty array removes every rule).")
  elseif not is_array(rules) then
    add("/rules", "invalid_value", "rules is an array.")
  elseif #rules > M.MAX_RULES then
    add("/rules", "too_many", "At most " .. M.MAX_RULES .. " rules.")
  else
    local ids = {}
    for i, rule in ipairs(rules) do check_rule(rule, "/rules/" .. (i - 1), add, ids) end
  end
  if #errors > 0 then return nil, errors end
  local out = {}
  for i, r in ipairs(rules) do
    local scope = json.null
    if r.scope ~= nil and r.scope ~= json.null then
      scope = { socialAccountIds = r.scope.socialAccountIds or json.null, platforms = r.scope.platforms or json.null }
    end
    out[i] = { id = r.id or ("rule_" .. crypto.random_token(16)), name = r.name or json.null,
      enabled = r.enabled ~= false, match = r.match, scope = scope, action = r.action }
  end
  return out
end

-- The stored rules' scope account ids that are no account of the client's
-- company and environment, as errors[] entries (a PUT's second check).
function M.foreign_accounts(client, stored)
  local all = {}
  for _, r in ipairs(stored) do
    local ids = r.scope ~= json.null and r.scope.socialAccountIds
    if type(ids) == "table" then
      for _, id in ipairs(ids) do all[#all + 1] = id end
    end
  end
  local errors = {}
  if #all == 0 then return errors end
  -- One statement for every rule's ids (up to 200 x 100 of them).
  local known = {}
  for _, row in ipairs(assert(db.query([[SELECT id FROM social_accounts
      WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb)) AND company_id = $2 AND environment = $3]],
      json.encode(all), client.company_id, client.environment))) do
    known[row.id] = true
  end
  for i, r in ipairs(stored) do
    local ids = r.scope ~= json.null and r.scope.socialAccountIds
    if type(ids) == "table" then
      for j, id in ipairs(ids) do
        if not known[id] then
          errors[#errors + 1] = { field = "/rules/" .. (i - 1) .. "/scope/socialAccountIds/" .. (j - 1),
            code = "invalid_value", message = "No social account of yours with id " .. id .. " in this environment." }
        end
      end
    end
  end
  return errors
end

-- ---------------------------------------------------------------- storage

-- The saved rules of a company and environment ({} when none), and their version (0).
function M.load(company_id, environment)
  local row = assert(db.query([[SELECT version, rules FROM moderation_rule_sets
      WHERE company_id = $1 AND environment = $2]], company_id, environment))[1]
  if not row then return {}, 0 end
  return row.rules, row.version
end

-- Replaces them; a new version, so every instance compiles them again.
function M.save(company_id, environment, rules)
  assert(db.exec([[INSERT INTO moderation_rule_sets (company_id, environment, version, rules)
      VALUES ($1, $2, 1, $3)
      ON CONFLICT (company_id, environment) DO UPDATE
        SET version = moderation_rule_sets.version + 1, rules = excluded.rules, updated_at = now()]],
    company_id, environment, json.encode(json.array(rules))))
end

-- The rules as the API shows them.
function M.present(rules)
  local out = {}
  for i, r in ipairs(rules) do
    local scope = r.scope
    if scope ~= json.null then
      scope = { socialAccountIds = scope.socialAccountIds, platforms = scope.platforms }
    end
    out[i] = { id = r.id, name = r.name, enabled = r.enabled, match = r.match, scope = scope, action = r.action }
  end
  return { rules = json.array(out) }
end

-- ---------------------------------------------------------------- running

-- A rule ready to run: the stored rule, its scope as sets, its match as functions.
local function as_set(list)
  if list == nil or list == json.null then return nil end
  local set = {}
  for _, v in ipairs(list) do set[v] = true end
  return set
end

-- Two rules with the same signature are in scope for the same comments.
local function scope_signature(scope)
  if scope == json.null then return "" end
  local function part(list)
    if list == nil or list == json.null then return "*" end
    local sorted = {}
    for i, v in ipairs(list) do sorted[i] = v end
    table.sort(sorted)
    return table.concat(sorted, "\0")
  end
  return part(scope.socialAccountIds) .. "\1" .. part(scope.platforms)
end

local function rank(key) return M.matcher(key).cheap and 0 or 1 end
local function by_cost(x, y)
  if rank(x) ~= rank(y) then return rank(x) < rank(y) end
  return x < y
end

-- When a matcher's compile_set gives no first(comment, lo, hi): its tests in turn.
local function first_of(tests)
  return function(comment, lo, hi)
    for i = lo, hi do
      if tests[i](comment) then return i end
    end
  end
end

-- The enabled rules as steps, in order, each run by first_match as one unit:
-- a run of consecutive rules of one key alone and one scope asks the key's
-- matcher once for the lowest of them that holds (60 keyword rules cost one
-- look at the keyword index, not 60 calls); a rule of several keys has one
-- test per key, cheap keys first (every key must hold, so the order only
-- changes what is prepared).
function M.compile(rules)
  local steps, by_key = {}, {}
  -- each use of a key's value: filled in below, once every rule's values of it are known
  local function use(key, value, fill)
    local uses = by_key[key] or { values = {}, fills = {} }
    by_key[key] = uses
    uses.values[#uses.values + 1] = value
    uses.fills[#uses.fills + 1] = fill
    return #uses.values
  end
  local run
  for _, r in ipairs(rules) do
    if r.enabled then
      local keys = sorted_keys(r.match)
      local signature = scope_signature(r.scope)
      if #keys == 1 and run and run.key == keys[1] and run.signature == signature then
        run.hi = use(run.key, r.match[run.key], function() end)
        run.rules[#run.rules + 1] = r
      else
        local scope = r.scope ~= json.null and r.scope or {}
        local step = { accounts = as_set(scope.socialAccountIds), platforms = as_set(scope.platforms) }
        steps[#steps + 1] = step
        if #keys == 1 then
          run = step
          step.key, step.signature, step.rules = keys[1], signature, { r }
          step.lo = use(step.key, r.match[step.key], function(_, first) step.first = first end)
          step.hi = step.lo
        else
          run = nil
          step.rule, step.tests = r, {}
          table.sort(keys, by_cost)
          for k, key in ipairs(keys) do
            use(key, r.match[key], function(test) step.tests[k] = test end)
          end
        end
      end
    end
  end
  for key, uses in pairs(by_key) do
    local m = assert(M.matcher(key), "no matcher for " .. key)
    local tests, first
    if m.compile_set then
      tests, first = m.compile_set(uses.values)
    else
      tests = {}
      for i, value in ipairs(uses.values) do tests[i] = m.compile(value) end
    end
    first = first or first_of(tests)
    for i, fill in ipairs(uses.fills) do fill(tests[i], first) end
  end
  return { steps = steps, plans = {} }
end

-- The steps in scope for an account and platform, made on first use: a rule
-- out of scope then costs nothing per comment.
local function plan(compiled, account, platform)
  local key = tostring(account) .. "\0" .. tostring(platform)
  local steps = compiled.plans[key]
  if steps then return steps end
  steps = {}
  for _, s in ipairs(compiled.steps) do
    if (not s.accounts or s.accounts[account]) and (not s.platforms or s.platforms[platform]) then
      steps[#steps + 1] = s
    end
  end
  compiled.plans[key] = steps
  return steps
end

-- What matchers see of a comment: text, author_id, platform,
-- social_account_id, and derived forms made on first use, once: folded,
-- spaced (text_fold.spaced of folded), length (in characters).
local DERIVED = {
  folded = function(c) return text_fold.fold(c.text) end,
  spaced = function(c) return text_fold.spaced(c.folded) end,
  length = function(c) return utf8.len(c.text) or #c.text end,
}
local SUBJECT = { __index = function(c, k)
  local make = DERIVED[k]
  if not make then return nil end
  local v = make(c)
  rawset(c, k, v)
  return v
end }

function M.subject(text, author_id, platform, social_account_id)
  return setmetatable({ text = text or "", author_id = author_id, platform = platform,
    social_account_id = social_account_id }, SUBJECT)
end

-- The first compiled rule that acts on the subject, or nil.
-- (Numeric loops: this runs per step per comment, ipairs costs a call each.)
function M.first_match(compiled, subject)
  local steps = plan(compiled, subject.social_account_id, subject.platform)
  for i = 1, #steps do
    local s = steps[i]
    local first = s.first
    if first then
      local lo = s.lo
      local hit = first(subject, lo, s.hi)
      if hit then return s.rules[hit - lo + 1] end
    else
      local tests, all = s.tests, true
      for k = 1, #tests do
        if not tests[k](subject) then all = false break end
      end
      if all then return s.rule end
    end
  end
end

local TEST_SPEC = {
  text = { type = "string", required = true, max = 8000 },
  authorId = { type = "string", min = 1, max = 64 },
  platform = { type = "string", enum = M.PLATFORMS },
  socialAccountId = { type = "string", min = 1, max = 64 },
}

-- What POST /moderation/rules/test answers for a body {text, authorId,
-- platform, socialAccountId}: the first saved rule that would act on such a
-- comment (nil for none), or nil and errors[] entries.
function M.test(client, body)
  local errors = fields.check(body, TEST_SPEC)
  if #errors == 0 and body.socialAccountId then
    local account = assert(db.query([[SELECT platform FROM social_accounts WHERE id = $1 AND company_id = $2
        AND environment = $3]], body.socialAccountId, client.company_id, client.environment))[1]
    if not account then
      errors[1] = { field = "/socialAccountId", code = "invalid_value",
        message = "No social account of yours with this id in this environment." }
    elseif body.platform and body.platform ~= account.platform then
      errors[1] = { field = "/platform", code = "invalid_value", message = "The account is on " .. account.platform .. "." }
    end
    body.platform = body.platform or (account and account.platform)
  end
  if #errors > 0 then return nil, errors end
  return M.first_match(M.compiled(client.company_id, client.environment),
    M.subject(body.text, body.authorId, body.platform, body.socialAccountId))
end

-- Compiled rules per company and environment, with the version they come
-- from. Each use asks the database for the version only (the rules come
-- along when it moved), so a PUT on any instance is seen by all at once.
local cache = {}

function M.compiled(company_id, environment)
  local key = company_id .. "\0" .. environment
  local hit = cache[key]
  local row = assert(db.query([[SELECT version, CASE WHEN version IS DISTINCT FROM $3 THEN rules END AS rules
      FROM moderation_rule_sets WHERE company_id = $1 AND environment = $2]],
    company_id, environment, hit and hit.version or -1))[1]
  if not row then
    cache[key] = nil
    return M.compile({})
  end
  if hit and hit.version == row.version then return hit.compiled end
  hit = { version = row.version, compiled = M.compile(row.rules) }
  cache[key] = hit
  return hit.compiled
end

-- Runs the rules on comments just stored (rows of comments.apply, inside its
-- transaction): new ones someone else wrote, not deleted, whose text is
-- known (one first seen through a hide, before its creation arrived, is not
-- judged on the text it does not have yet). hide and delete
-- become a moderation operation of the post's client in this transaction
-- (its job runs after the commit, so a crash loses nothing); flag emits
-- social.comment.flagged. Edits of known comments are never judged again.
function M.act(created)
  for _, r in ipairs(created) do
    if not r.is_from_account and not r.is_deleted and r.text ~= nil then
      local rule = M.first_match(M.compiled(r.company_id, r.environment),
        M.subject(r.text, r.author_platform_id, r.platform, r.social_account_id))
      if rule then
        local client = { company_id = r.company_id, environment = r.environment, client_id = r.client_id }
        if rule.action == "flag" then
          events.emit(client, "social.comment.flagged", { comment = comments.present(r), ruleId = rule.id })
        else
          moderation.create(client, r, rule.action, { type = "rule", id = rule.id }, nil,
            { type = "rule", ruleId = rule.id })
        end
      end
    end
  end
end

return M

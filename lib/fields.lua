-- Checks a small JSON body against a field table, reporting every problem at
-- once in the contract's errors[] shape. For endpoints with a few flat
-- fields; posts have their own rules (post_rules).
local json = require "json"

local M = {}

M.COMPANY_MESSAGE = "The company is taken from the credential; do not send companyId."

local function pointer(at, key)
  return at .. "/" .. tostring(key):gsub("~", "~0"):gsub("/", "~1")
end

-- Whether companyId is a key anywhere in value. Allocates nothing: every
-- JSON body passes here, and almost none holds one.
local function has_company_id(value)
  for k, v in next, value do
    if k == "companyId" or (type(v) == "table" and has_company_id(v)) then return true end
  end
  return false
end

function M.has_company_id(value)
  return type(value) == "table" and has_company_id(value)
end

local function each_company_field(value, at, add)
  if type(value) ~= "table" then return end
  local keys = {}
  for k in pairs(value) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) == type(b) then return a < b end
    return type(a) == "number"
  end)
  for _, k in ipairs(keys) do
    local here = pointer(at, math.type(k) == "integer" and k - 1 or k)
    if k == "companyId" then add(here, "field_not_allowed", M.COMPANY_MESSAGE) end
    each_company_field(value[k], here, add)
  end
end

-- The company comes only from the credential: calls add(field, code,
-- message) for every companyId in value, at any depth (field: a JSON
-- Pointer below `at`), in a stable order. Returns whether there was one.
function M.company_fields(value, at, add)
  if type(value) ~= "table" or not has_company_id(value) then return false end
  each_company_field(value, at, add)
  return true
end

-- spec: { name = { type = "string"|"integer"|"boolean"|"array", required = bool,
--                  enum = {...}, min = n, max = n } }   (min/max: length, items or value;
--                  an array's items are the caller's to check)
function M.check(body, spec)
  local errors = {}
  local function add(field, code, message)
    errors[#errors + 1] = { field = "/" .. field, code = code, message = message }
  end
  -- cjson decodes arrays to tables too; a non-empty one is no object.
  if type(body) ~= "table" or (next(body) ~= nil and json.is_array(body)) then
    return { { field = "", code = "invalid_value", message = "The body must be a JSON object." } }
  end
  for name in pairs(body) do
    if not spec[name] and name ~= "companyId" then add(name, "unknown_field", "Unknown field " .. name .. ".") end
  end
  M.company_fields(body, "", function(field, code, message)
    errors[#errors + 1] = { field = field, code = code, message = message }
  end)
  for name, rule in pairs(spec) do
    local v = body[name]
    if v == nil then
      if rule.required then add(name, "required", name .. " is required.") end
    elseif rule.type == "integer" and math.type(v) ~= "integer" and not (type(v) == "number" and v % 1 == 0) then
      add(name, "invalid_value", name .. " must be a whole number.")
    elseif rule.type == "array" then
      if not json.is_array(v) then
        add(name, "invalid_value", name .. " must be an array.")
      elseif (rule.min and #v < rule.min) or (rule.max and #v > rule.max) then
        add(name, "invalid_value", name .. " must hold " .. rule.min .. " to " .. rule.max .. " items.")
      end
    elseif rule.type ~= "integer" and type(v) ~= rule.type then
      add(name, "invalid_value", name .. " must be a " .. rule.type .. ".")
    elseif rule.enum and not rule.enum[v] then
      local names = {}
      for k in pairs(rule.enum) do names[#names + 1] = k end
      table.sort(names)
      add(name, "invalid_value", name .. " must be one of " .. table.concat(names, ", ") .. ".")
    else
      local size = type(v) == "string" and utf8.len(v) or v
      if size == nil then
        add(name, "invalid_value", name .. " must be valid UTF-8.")
      elseif rule.min and size < rule.min then
        add(name, type(v) == "string" and "required" or "invalid_value",
          name .. (type(v) == "string" and " must not be empty." or " must be at least " .. rule.min .. "."))
      elseif rule.max and size > rule.max then
        add(name, type(v) == "string" and "too_long" or "invalid_value",
          name .. " must be at most " .. rule.max .. (type(v) == "string" and " characters." or "."))
      end
    end
  end
  table.sort(errors, function(a, b) return a.field < b.field end)
  return errors
end

return M

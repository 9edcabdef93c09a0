-- A small Mustache-like template renderer for HTML pages. Everything is
-- escaped unless the template says otherwise, so forgetting is safe:
--
--   {{name}}        the value, HTML-escaped (dotted names: {{client.name}}; {{.}} the current item)
--   {{{name}}}      the value as is (only for HTML the code built and escaped itself)
--   {{#name}}..{{/name}}  a list: once per item (the item's fields come first in
--                   lookups); a table: once, with its fields; other truthy values: once
--   {{^name}}..{{/name}}  once when the value is false, nil or an empty list
--   {{> name}}      another template (a partial), with the same data
--   {{! comment}}
--
-- Templates are compiled once and kept; the cache lives as long as the code
-- generation, so templates reload with the handlers.
local M = {}

local ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

function M.escape(s)
  return (tostring(s):gsub("[&<>\"']", ESCAPES))
end

-- Text -> tree of nodes: strings, and {kind, name, children}.
local function parse(text, source)
  local root = {}
  local stack = { { children = root } }
  local pos = 1
  while true do
    local open = text:find("{{", pos, true)
    local children = stack[#stack].children
    if not open then
      if pos <= #text then children[#children + 1] = text:sub(pos) end
      break
    end
    if open > pos then children[#children + 1] = text:sub(pos, open - 1) end
    local triple = text:sub(open, open + 2) == "{{{"
    local close_tag = triple and "}}}" or "}}"
    local close = text:find(close_tag, open + #close_tag, true)
    if not close then error(source .. ": unclosed tag at byte " .. open, 0) end
    local tag = text:sub(open + (triple and 3 or 2), close - 1)
    pos = close + #close_tag
    local sigil, name = tag:match("^%s*([#^/>!&]?)%s*(.-)%s*$")
    if triple then
      children[#children + 1] = { kind = "raw", name = name }
    elseif sigil == "" then
      children[#children + 1] = { kind = "var", name = name }
    elseif sigil == "&" then
      children[#children + 1] = { kind = "raw", name = name }
    elseif sigil == "#" or sigil == "^" then
      local node = { kind = sigil == "#" and "section" or "inverted", name = name, children = {} }
      children[#children + 1] = node
      stack[#stack + 1] = node
    elseif sigil == "/" then
      local top = stack[#stack]
      if #stack == 1 or top.name ~= name then
        error(source .. ": {{/" .. name .. "}} closes nothing open", 0)
      end
      stack[#stack] = nil
    elseif sigil == ">" then
      children[#children + 1] = { kind = "partial", name = name }
    end -- "!" is a comment
  end
  if #stack > 1 then error(source .. ": {{#" .. stack[#stack].name .. "}} is never closed", 0) end
  return root
end

local function is_list(v)
  return type(v) == "table" and (v[1] ~= nil or next(v) == nil)
end

-- Looks a (dotted) name up through the context stack, innermost first.
local function lookup(contexts, name)
  if name == "." then return contexts[#contexts] end
  local first, rest = name:match("^([^.]+)%.?(.*)$")
  for i = #contexts, 1, -1 do
    local ctx = contexts[i]
    if type(ctx) == "table" and ctx[first] ~= nil then
      local value = ctx[first]
      for part in rest:gmatch("[^.]+") do
        if type(value) ~= "table" then return nil end
        value = value[part]
      end
      return value
    end
  end
  return nil
end

local function falsy(v)
  return v == nil or v == false or v == "" or (is_list(v) and v[1] == nil)
end

local render_nodes

local function render_section(node, value, contexts, out, partial)
  if is_list(value) then
    for _, item in ipairs(value) do
      contexts[#contexts + 1] = item
      render_nodes(node.children, contexts, out, partial)
      contexts[#contexts] = nil
    end
  elseif type(value) == "table" then
    contexts[#contexts + 1] = value
    render_nodes(node.children, contexts, out, partial)
    contexts[#contexts] = nil
  else
    render_nodes(node.children, contexts, out, partial)
  end
end

function render_nodes(nodes, contexts, out, partial)
  for _, node in ipairs(nodes) do
    if type(node) == "string" then
      out[#out + 1] = node
    elseif node.kind == "var" or node.kind == "raw" then
      local value = lookup(contexts, node.name)
      if value ~= nil and value ~= false then
        out[#out + 1] = node.kind == "var" and M.escape(value) or tostring(value)
      end
    elseif node.kind == "section" then
      local value = lookup(contexts, node.name)
      if not falsy(value) then render_section(node, value, contexts, out, partial) end
    elseif node.kind == "inverted" then
      if falsy(lookup(contexts, node.name)) then render_nodes(node.children, contexts, out, partial) end
    elseif node.kind == "partial" then
      render_nodes(partial(node.name), contexts, out, partial)
    end
  end
end

-- loader -> name -> tree
local compiled = setmetatable({}, { __mode = "k" })

-- A template by name from a loader (name -> text or nil), compiled once.
local function compile(name, loader)
  local cache = compiled[loader]
  if not cache then
    cache = {}
    compiled[loader] = cache
  end
  local tree = cache[name]
  if not tree then
    local text = loader(name)
    if not text then error("no template " .. name, 0) end
    tree = parse(text, name)
    cache[name] = tree
  end
  return tree
end

-- Renders template text with data; partials come from loader (default: none).
function M.render_string(text, data, loader)
  local out = {}
  local function partial(name)
    if not loader then error("no loader for partial " .. name, 0) end
    return compile(name, loader)
  end
  render_nodes(parse(text, "(string)"), { data }, out, partial)
  return table.concat(out)
end

-- Renders the template `name` (and its partials) from loader with data.
function M.render(name, data, loader)
  local out = {}
  local function partial(pname) return compile(pname, loader) end
  render_nodes(compile(name, loader), { data }, out, partial)
  return table.concat(out)
end

return M

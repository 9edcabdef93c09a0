-- The keys of a JSON object text in the order they are written, for specs
-- that check the bytes of an answer, not only its value.
local M = {}

-- The keys of the object that starts text (top level only), in order.
function M.top(text)
  local keys, depth, i = {}, 0, 1
  while i <= #text do
    local c = text:sub(i, i)
    if c == '"' then
      local j = i + 1
      while text:sub(j, j) ~= '"' do j = j + (text:sub(j, j) == "\\" and 2 or 1) end
      if depth == 1 and text:sub(j + 1, j + 1) == ":" then keys[#keys + 1] = text:sub(i + 1, j - 1) end
      i = j
    elseif c == "{" or c == "[" then
      depth = depth + 1
    elseif c == "}" or c == "]" then
      depth = depth - 1
      if depth == 0 then break end
    end
    i = i + 1
  end
  return keys
end

-- The keys of the object that is the value of "name" (its first occurrence),
-- or of the first element when that value is an array.
function M.of(text, name)
  local at = text:find('"' .. name .. '":', 1, true)
  assert(at, "no key " .. name .. " in " .. text)
  return M.top(text:sub(at + #name + 3):match("^%[?(%b{})"))
end

return M

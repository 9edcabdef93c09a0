-- multipart/form-data (RFC 7578, RFC 2046 5.1) as far as uploads need it:
-- the content of the part named "file".
--
--   multipart.parse(body, content_type) -> bytes, declared_type | nil, message
--
-- Strict on purpose: CRLF line ends, a closing delimiter, one part named
-- "file", at most MAX_PARTS parts and MAX_HEADER_BYTES of headers per part.
-- Delimiters are found with plain string.find, so the cost is linear in the
-- body whatever it holds.
local M = {}

M.MAX_PARTS = 16
M.MAX_HEADER_BYTES = 8192

local TOKEN = "[%w!#$%%&'*+%-.^_`|~]+"

-- Parameters of a header value from pos on (`; name=value; name="a \"b\""`):
-- a table of lower-case names to values, or nil when malformed.
function M.params(s, pos)
  local out = {}
  pos = pos or 1
  while true do
    pos = s:match("^%s*()", pos)
    if pos > #s then return out end
    local name, at = s:match("^;%s*(" .. TOKEN .. ")%s*=%s*()", pos)
    if not name then
      if s:match("^;%s*$", pos) then return out end -- a trailing ";"
      return nil
    end
    local value
    if s:sub(at, at) == '"' then
      local buf, i = {}, at + 1
      while true do
        local c = s:sub(i, i)
        if c == '"' then break end
        if c == "\\" then i = i + 1; c = s:sub(i, i) end -- quoted-pair
        if c == "" then return nil end -- unterminated
        buf[#buf + 1] = c
        i = i + 1
      end
      value, pos = table.concat(buf), i + 1
    else
      value, pos = s:match("^(" .. TOKEN .. ")()", at)
      if not value then return nil end
    end
    out[name:lower()] = value
  end
end

-- The boundary of a multipart/form-data Content-Type, or nil, message.
function M.boundary(content_type)
  local media, rest = (content_type or ""):match("^%s*([^;%s]+)()")
  if not media or media:lower() ~= "multipart/form-data" then
    return nil, "the Content-Type is not multipart/form-data"
  end
  local params = M.params(content_type, rest)
  local b = params and params.boundary
  -- RFC 2046: 1 to 70 characters of a restricted set, not ending in a space
  if not b or #b < 1 or #b > 70 or b:find("[^%w'()+_,%-./:=? ]") or b:sub(-1) == " " then
    return nil, "the Content-Type has no valid boundary parameter"
  end
  return b
end

-- Header lines of one part: a table of lower-case names to values, or nil.
local function part_headers(block)
  local headers = {}
  if block == "" then return headers end
  for line in (block .. "\r\n"):gmatch("(.-)\r\n") do
    local name, at = line:match("^(" .. TOKEN .. "):[ \t]*()")
    if not name then return nil end -- includes folded lines and bare LFs
    -- Greedy to the last byte that is not a space or tab: one pass (a lazy
    -- value before trailing blanks costs steps in the square of them).
    headers[name:lower()] = line:match("^.*[^ \t]", at) or ""
  end
  return headers
end

-- The name of a part from its Content-Disposition (`form-data; name="file"`).
local function part_name(disposition)
  local kind, rest = (disposition or ""):match("^(" .. TOKEN .. ")()")
  if not kind or kind:lower() ~= "form-data" then return nil end
  local params = M.params(disposition, rest)
  return params and params.name
end

function M.parse(body, content_type)
  local boundary, err = M.boundary(content_type)
  if not boundary then return nil, err end
  local dash = "--" .. boundary
  local delimiter = "\r\n" .. dash
  -- The first delimiter opens the body, or ends a preamble.
  local pos
  if body:sub(1, #dash) == dash then
    pos = #dash + 1
  else
    local _, e = body:find(delimiter, 1, true)
    if not e then return nil, "the body does not contain the boundary" end
    pos = e + 1
  end

  local file, file_type
  for _ = 1, M.MAX_PARTS do
    -- After a delimiter: "--" closes the body; else optional padding and CRLF.
    if body:sub(pos, pos + 1) == "--" then
      if not file then return nil, "there is no part named file" end
      return file, file_type
    end
    local start = body:match("^[ \t]*\r\n()", pos)
    if not start then return nil, "a boundary line is malformed" end
    local headers_end, content
    if body:sub(start, start + 1) == "\r\n" then
      headers_end, content = start - 1, start + 2 -- a part without headers
    else
      local e = body:find("\r\n\r\n", start, true)
      if not e then return nil, "a part's headers do not end" end
      headers_end, content = e - 1, e + 4
    end
    if headers_end - start + 1 > M.MAX_HEADER_BYTES then return nil, "a part's headers are too large" end
    local headers = part_headers(body:sub(start, headers_end))
    if not headers then return nil, "a part's headers are malformed" end
    local finish = body:find(delimiter, content, true)
    if not finish then return nil, "the body ends before the closing boundary" end
    if part_name(headers["content-disposition"]) == "file" then
      if file then return nil, "there is more than one part named file" end
      file, file_type = body:sub(content, finish - 1), headers["content-type"]
    end
    pos = finish + #delimiter
  end
  return nil, "the body has more than " .. M.MAX_PARTS .. " parts"
end

return M

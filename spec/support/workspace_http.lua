-- spec/support/workspace_http.lua — the web workspace over plain HTTP, as a
-- browser at one client address drives it: its cookie, the forms' CSRF
-- tokens. For specs that submit a form many times, where a real browser
-- would only add minutes.
local http = require "socket.http"
local socket = require "socket"
local ltn12 = require "ltn12"

local M = {}

-- One browser at one address: its cookie jar is the workspace cookie.
function M.client(sgw, address)
  local c = { cookie = nil }
  function c.request(method, path, body)
    local chunks = {}
    local headers = { cookie = c.cookie }
    http.TIMEOUT = 30 -- a sign-up hashes a password: slow on a busy machine
    if body then
      headers["content-type"] = "application/x-www-form-urlencoded"
      headers["content-length"] = tostring(#body)
    end
    local ok, status, h = http.request {
      url = sgw.base_url .. path, method = method, headers = headers, redirect = false,
      source = body and ltn12.source.string(body) or nil, sink = ltn12.sink.table(chunks),
      create = function()
        local s = socket.tcp()
        assert(s:bind(address, 0))
        return s
      end,
    }
    assert(ok, status)
    local set = h["set-cookie"]
    if set then c.cookie = set:match("^(sgw_workspace=[^;]*)") end
    return status, table.concat(chunks), h
  end
  local function encode(s)
    return (s:gsub("[^%w%-%._~]", function(ch) return ("%%%02X"):format(ch:byte()) end))
  end
  -- GETs the form's page (form_page, or path itself), then posts fields to
  -- path with its CSRF token.
  function c.submit(path, fields, form_page)
    local status, page = c.request("GET", form_page or path)
    assert(status == 200, (form_page or path) .. ": " .. tostring(status))
    local csrf = assert(page:match('name="csrf" value="([^"]+)"'), "no csrf token")
    local parts = { "csrf=" .. encode(csrf) }
    for k, v in pairs(fields) do parts[#parts + 1] = k .. "=" .. encode(v) end
    return c.request("POST", path, table.concat(parts, "&"))
  end
  function c.sign_in(email, password)
    return c.submit("/workspace/login", { email = email, password = password })
  end
  return c
end

return M

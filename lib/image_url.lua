-- The image behind a post's content.imageUrl, fetched once when an Instagram post is
-- created so that Meta's image rules are checked on the real bytes before Meta sees
-- them (CONTRACT 11): what Instagram would refuse minutes later is a 422 now.
--
--   image_url.fetch(url) -> { mime_type, jpeg_variant, size_bytes, width, height }
--                         | nil, code, message      (a field code and a safe message)
--
-- The URL comes from a client, so the fetch is fenced in: https only, every hop; at
-- most MAX_REDIRECTS redirects, followed here so each hop is checked again; the
-- address connected to must be a public one (the host checks it after resolving and
-- before connecting, see docs/host-api.md); at most uploads.max_bytes (+1, to tell
-- "too large") in posts.image_fetch_timeout_seconds overall. Messages never carry
-- the transport's own error text: it can tell a client about our network.
local images = require "images"

local M = {}

M.MAX_REDIRECTS = 3

local REDIRECTS = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }

-- Why a call failed, by the host's error kind, in words that reveal nothing inside.
local REASONS = {
  forbidden = "its address is not a public internet address",
  connect = "no connection could be made to its server",
  protocol = "the server's answer was not valid HTTP",
}

local function unreachable(reason)
  return nil, "image_url_unreachable",
    ("The image at imageUrl could not be fetched: %s. Give a public https:// URL that answers "
      .. "with the image."):format(reason)
end

-- The download stopped at the limit, so the measured value is "more than".
local function too_large(max_bytes)
  return nil, "image_too_large", ("The image has more than %d bytes (%.1f MiB), the most this service "
    .. "fetches; Instagram takes at most 8 MiB (8388608 bytes)."):format(max_bytes, max_bytes / 1048576)
end

-- The absolute URL a Location header names, relative to `base`.
function M.resolve(base, location)
  if location:match("^%a[%w+.-]*:") then return location end
  local scheme, authority, path = base:match("^(%a[%w+.-]*)://([^/?#]*)([^?#]*)")
  if location:sub(1, 2) == "//" then return scheme .. ":" .. location end
  if location:sub(1, 1) == "/" then return scheme .. "://" .. authority .. location end
  local dir = path:match("^(.*/)") or "/"
  if location:sub(1, 1) == "?" then dir = path ~= "" and path or "/" end
  return scheme .. "://" .. authority .. dir .. location
end

function M.fetch(url)
  local max_bytes = config.get("uploads.max_bytes")
  local budget = config.get("posts.image_fetch_timeout_seconds")
  local deadline = clock.mono_ms() + budget * 1000
  for _ = 0, M.MAX_REDIRECTS do
    if not url:lower():match("^https://") then
      return unreachable("it redirects to a URL that is not https")
    end
    local left = (deadline - clock.mono_ms()) / 1000
    if left <= 0 then return unreachable(("it took longer than the %g s allowed"):format(budget)) end
    local res, _, kind = http.request({
      url = url, timeout = left, connect_timeout = left, max_body_bytes = max_bytes + 1,
      headers = { Accept = "image/jpeg, image/*;q=0.8" },
      deny_private_addresses = not config.get("posts.allow_private_image_urls"),
    })
    if not res then
      if kind == "too_large" then
        return too_large(max_bytes)
      elseif kind == "timeout" then
        return unreachable(("it took longer than the %g s allowed"):format(budget))
      end
      return unreachable(REASONS[kind] or "the transfer failed (for https, check the server's certificate)")
    end
    if REDIRECTS[res.status] and res.headers.location then
      url = M.resolve(url, res.headers.location)
    elseif res.status < 200 or res.status > 299 then
      return unreachable(("the server answered HTTP %d"):format(res.status))
    elseif #res.body > max_bytes then
      return too_large(max_bytes)
    else
      local image, why, message = images.sniff(res.body)
      if not image then
        if why == "unsupported" then
          return nil, "image_not_jpeg", "Instagram accepts only JPEG images and the file at imageUrl is not "
            .. "a JPEG (nor any image type this service recognises); use a JPEG."
        end
        return nil, "invalid_image", "The file at imageUrl is not a valid image: " .. message
      end
      image.size_bytes = #res.body
      return image
    end
  end
  return unreachable(("it redirects more than %d times"):format(M.MAX_REDIRECTS))
end

return M

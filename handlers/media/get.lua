-- GET /media/{file}: an upload's bytes for whoever holds a valid signed URL
-- (lib/media.lua), which is how Facebook and Instagram fetch images: they
-- come without a credential. {file} is the upload id, optionally with the
-- extension of its type (upl_x.jpg). Every refusal (bad or expired signature,
-- unknown id, wrong extension) is the same 404, so probing tells nothing.
-- The route has a per-address limit of its own (media.rate_limit_per_minute):
-- platforms fetch from a few addresses, many images at once, and the
-- anonymous API limit would refuse them; the signature decides what can be
-- fetched.
local media = require "media"
local problem = require "problem"

local EXTENSIONS = { jpg = "image/jpeg", jpeg = "image/jpeg", png = "image/png", gif = "image/gif", webp = "image/webp" }

local function not_found()
  problem.raise(404, "not_found", "No media at this URL, or the link has expired.")
end

return function(req)
  local file = req.params.file
  local id, ext = file:match("^(upl_%w+)%.(%w+)$")
  id = id or file:match("^upl_%w+$")
  local ok, seconds_left = media.verify(id, req.query.exp, req.query.sig)
  if not ok then not_found() end
  local upload = media.read(id)
  if not upload or (ext and EXTENSIONS[ext:lower()] ~= upload.mime_type) then not_found() end
  -- No Content-Length here: libmicrohttpd sets it from the body (and drops
  -- one a handler sets).
  return 200, upload.bytes, {
    ["Content-Type"] = upload.mime_type,
    ["Cache-Control"] = "private, max-age=" .. seconds_left,
    ["X-Content-Type-Options"] = "nosniff",
  }
end

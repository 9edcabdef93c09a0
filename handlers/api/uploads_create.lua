-- POST /api/v1/uploads: an image as the raw body (any Content-Type) or as the
-- part "file" of a multipart/form-data body. Its type, size and dimensions
-- come from the bytes (lib/images.lua); what the client declares is only
-- logged. An empty body is 400 invalid_parameter: nothing was sent, which is
-- a malformed request rather than a bad image.
local problem = require "problem"
local images = require "images"
local multipart = require "multipart"
local media = require "media"

local INSERT = [[INSERT INTO uploads
    (id, company_id, environment, client_id, mime_type, size_bytes, width, height, sha256, jpeg_variant)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
  RETURNING ]] .. media.COLUMNS

return function(req, ctx)
  local bytes, declared = req.body or "", req.headers["content-type"]
  local media_type = declared and declared:match("^%s*([^;%s]+)")
  if media_type and media_type:lower() == "multipart/form-data" then
    local part_type_or_err
    bytes, part_type_or_err = multipart.parse(bytes, declared)
    if not bytes then
      problem.raise(400, "invalid_parameter", "The multipart/form-data body cannot be read: " .. part_type_or_err
        .. ". Send the image in a part named file, or send the bytes as the whole body.")
    end
    declared = part_type_or_err
  end
  if #bytes == 0 then
    problem.raise(400, "invalid_parameter",
      "The body is empty: send the image bytes as the body, or as a multipart/form-data part named file.")
  end
  -- The route's body limit leaves room for multipart framing; the file
  -- itself is held to uploads.max_bytes here.
  local max = config.get("uploads.max_bytes")
  if #bytes > max then
    problem.raise(413, "payload_too_large", ("The image is %d bytes; at most %d are accepted."):format(#bytes, max))
  end
  local image, kind, message = images.sniff(bytes)
  if not image then
    if kind == "unsupported" then problem.raise(415, "unsupported_media_type", message) end
    problem.raise(422, "invalid_image", message)
  end

  local c = ctx.client
  local row
  db.transaction(function()
    media.reserve_quota(c.company_id, c.environment, #bytes)
    row = assert(db.query(INSERT, "upl_" .. crypto.random_token(24), c.company_id, c.environment, c.client_id,
      image.mime_type, #bytes, image.width, image.height, crypto.sha256_hex(bytes), image.jpeg_variant))[1]
    assert(db.exec("INSERT INTO upload_bytes (upload_id, data) VALUES ($1, decode($2, 'base64'))",
      row.id, crypto.base64_encode(bytes)))
  end)
  log.info("upload_created", { requestId = req.id, uploadId = row.id, mimeType = row.mime_type,
    declaredType = declared, sizeBytes = row.size_bytes })
  return 201, {
    uploadId = row.id, mimeType = row.mime_type, sizeBytes = row.size_bytes,
    width = row.width, height = row.height, sha256 = row.sha256, createdAt = row.created_at,
  }
end

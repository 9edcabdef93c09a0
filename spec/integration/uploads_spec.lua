-- Uploads against the real stack: POST /api/v1/uploads (raw and multipart
-- bodies, type and size from the bytes, limits, scope, idempotency), the
-- signed /media URLs platforms fetch them from, and tenancy of upload ids.
local stack = require "stack"
local fixture_root = require "fixture_root"
local img = require "image_fixtures"
local cjson = require "cjson.safe"

local ENCRYPTION_KEY = stack.ENCRYPTION_KEY

-- test only: media.url and media.find_upload as the caller's client sees them
local PROBE_ROUTE = '{ method = "GET", path = "/test/media/{uploadId}", handler = "test/media_probe", scope = "uploads:write" }'

local PROBE = [[
local media = require "media"
return function(req, ctx)
  local url, exp_or_err = media.url(req.params.uploadId, tonumber(req.query.ttl))
  local row = media.find_upload(ctx.client, req.params.uploadId)
  return 200, { found = row ~= nil, upload = row, url = url, exp = url and exp_or_err, error = not url and exp_or_err or nil }
end
]]

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function make_root()
  local root = fixture_root.create("uploads")
  fixture_root.write(root .. "/handlers/test/media_probe.lua", PROBE)
  local path = root .. "/handlers/routes.lua"
  local patched, n = read(path):gsub("\nreturn routes%s*$", function()
    return "\nroutes[#routes + 1] = " .. PROBE_ROUTE .. "\nreturn routes\n"
  end)
  assert(n == 1, "handlers/routes.lua no longer ends with 'return routes'")
  fixture_root.write(path, patched)
  return root
end

local function cli(inst, argv)
  local code, out = inst:command(argv)
  assert(code == 0, table.concat(argv, " ") .. " failed (" .. code .. "): " .. out)
  return assert(cjson.decode(out:match("(%b{})%s*$")), out)
end

local function sha256_hex(bytes)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  local _, out = stack.sh("sha256sum " .. stack.shell_quote(path))
  os.remove(path)
  return out:match("^(%x+)")
end

-- The problem document of an error response, checked for its code.
local function problem(_, body, headers, code)
  local p = cjson.decode(body)
  assert.are.equal(code, p and p.code, body)
  assert.are.equal("application/problem+json", headers["content-type"])
  return p
end

describe("uploads", function()
  local sgw, key_a, key_b, key_a_live, key_narrow

  local function upload(bytes, content_type, headers)
    local h = { ["X-Api-Key"] = key_a, ["Content-Type"] = content_type }
    for k, v in pairs(headers or {}) do h[k] = v end
    return sgw:request("POST", "/api/v1/uploads", { headers = h, body = bytes })
  end

  local function count()
    return tonumber(stack.psql(sgw.database_url, "SELECT count(*) FROM uploads"))
  end

  local function probe(id, key, ttl)
    local status, body = sgw:json("GET", "/test/media/" .. id .. (ttl and "?ttl=" .. ttl or ""),
      { headers = { ["X-Api-Key"] = key or key_a } })
    assert.are.equal(200, status)
    return body
  end

  local function created(bytes, content_type)
    local status, body = upload(bytes, content_type)
    assert.are.equal(201, status, body)
    return cjson.decode(body)
  end

  setup(function()
    sgw = stack.start_sgw {
      name = "uploads",
      set = {
        ["lua.root"] = make_root(),
        ["clock.allow_control"] = true,
        ["crypto.encryption_key"] = ENCRYPTION_KEY,
      },
    }
    local a = cli(sgw, { "company", "create", "--name", "A" }).companyId
    local b = cli(sgw, { "company", "create", "--name", "B" }).companyId
    local function key(company, env, scopes)
      return cli(sgw, { "client", "create", "--company", company, "--environment", env, "--scopes", scopes }).apiKey
    end
    key_a = key(a, "test", "uploads:write")
    key_b = key(b, "test", "uploads:write")
    key_a_live = key(a, "live", "uploads:write")
    key_narrow = key(a, "test", "posts:read")
  end)

  teardown(function() stack.cleanup() end)

  it("stores a raw JPEG and answers 201 with what the bytes say", function()
    local jpeg = img.jpeg(1080, 1350)
    local status, body, headers = upload(jpeg, "image/jpeg")
    assert.are.equal(201, status, body)
    assert.matches("^application/json", headers["content-type"])
    assert.is_truthy(headers["x-ratelimit-limit"])
    local u = cjson.decode(body)
    assert.matches("^upl_%w+$", u.uploadId)
    assert.are.equal("image/jpeg", u.mimeType)
    assert.are.equal(#jpeg, u.sizeBytes)
    assert.are.equal(1080, u.width)
    assert.are.equal(1350, u.height)
    assert.are.equal(sha256_hex(jpeg), u.sha256)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", u.createdAt)
    local row = stack.psql(sgw.database_url, "SELECT encode(sha256(b.data), 'hex') || ' ' || u.environment FROM uploads u "
      .. "JOIN upload_bytes b ON b.upload_id = u.id WHERE u.id = '"
      .. u.uploadId .. "'")
    assert.are.equal(u.sha256 .. " test", row)
  end)

  it("keeps that a JPEG is a multi-picture (MPO) one, which Instagram refuses, and says nothing of it to the client", function()
    local mpo = img.jpeg(1080, 1080, { app = img.mpf_segment({ 0x030000, 0x020002 }) }) .. "second picture"
    local u = created(mpo, "image/jpeg")
    assert.are.equal("image/jpeg", u.mimeType)
    assert.is_nil(u.jpegVariant)
    assert.are.equal("mpo", probe(u.uploadId).upload.jpeg_variant)
    assert.is_nil(probe(created(img.jpeg(1080, 1080), "image/jpeg").uploadId).upload.jpeg_variant)
    -- An Ultra HDR photo's gain map is an MPF entry too, but not a second view.
    local hdr = img.jpeg(1080, 1080, { app = img.mpf_segment({ 0x030000, 0x000000 }) }) .. "gain map"
    assert.is_nil(probe(created(hdr, "image/jpeg").uploadId).upload.jpeg_variant)
  end)

  it("takes any declared type, or none, for raw bytes", function()
    assert.are.equal("image/webp", created(img.webp_vp8l(10, 20), "application/octet-stream").mimeType)
    assert.are.equal("image/gif", created(img.gif(3, 4), nil).mimeType)
    local p = created(img.jpeg(8, 8, { sof = 0xC2 }), "image/jpeg")
    assert.are.same({ "image/jpeg", 8, 8 }, { p.mimeType, p.width, p.height })
  end)

  it("stores a PNG declared as image/jpeg as image/png", function()
    local u = created(img.png(7, 5), "image/jpeg")
    assert.are.same({ "image/png", 7, 5 }, { u.mimeType, u.width, u.height })
  end)

  it("takes the part named file of a multipart/form-data body", function()
    local png = img.png(16, 9)
    local boundary = "------------------------d74496d66958873e"
    local body = "--" .. boundary .. "\r\n"
      .. 'Content-Disposition: form-data; name="caption"\r\n\r\nhello\r\n'
      .. "--" .. boundary .. "\r\n"
      .. 'Content-Disposition: form-data; name="file"; filename="photo.jpg"\r\n'
      .. "Content-Type: image/jpeg\r\n\r\n" .. png .. "\r\n"
      .. "--" .. boundary .. "--\r\n"
    local u = created(body, "multipart/form-data; boundary=" .. boundary)
    assert.are.same({ "image/png", 16, 9, #png, sha256_hex(png) }, { u.mimeType, u.width, u.height, u.sizeBytes, u.sha256 })
  end)

  it("refuses what is not an accepted image (415) or is a corrupt one (422), storing nothing", function()
    local before = count()
    for _, case in ipairs {
      { 415, "unsupported_media_type", "just some text, honestly\n", "image/jpeg" },
      { 415, "unsupported_media_type", "<svg xmlns='http://www.w3.org/2000/svg' width='9' height='9'/>", "image/svg+xml" },
      { 415, "unsupported_media_type", "%PDF-1.7\n", "application/pdf" },
      { 422, "invalid_image", img.jpeg(640, 480):sub(1, -5), "image/jpeg" },         -- cut in the scan
      { 422, "invalid_image", img.jpeg(640, 480):sub(1, 100), "image/jpeg" },        -- cut in the header
      { 422, "invalid_image", img.jpeg(20000, 20000), "image/jpeg" },
      { 422, "invalid_image", img.png(0, 10), "image/png" },
    } do
      local s, b, h = upload(case[3], case[4])
      assert.are.equal(case[1], s, b)
      local p = problem(s, b, h, case[2])
      assert.are.equal(case[1], p.status)
    end
    local _, b = upload(img.jpeg(20000, 20000), "image/jpeg")
    assert.matches("20000 x 20000 px; each side may be at most 8192 px", cjson.decode(b).detail, 1, true)
    assert.are.equal(before, count())
  end)

  it("refuses an empty body or a broken multipart body with 400 invalid_parameter", function()
    for _, case in ipairs {
      { "", "image/jpeg" },
      { "--x\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nv\r\n--x--", "multipart/form-data; boundary=x" },
      { "--x\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nv", "multipart/form-data; boundary=x" },
      { "abc", "multipart/form-data" },
    } do
      local s, b, h = upload(case[1], case[2])
      assert.are.equal(400, s, b)
      problem(s, b, h, "invalid_parameter")
    end
  end)

  it("refuses images over uploads.max_bytes with 413, storing nothing", function()
    local before = count()
    local max = 8 * 1024 * 1024
    -- valid JPEGs of an exact size, so that only the size can be wrong
    local function jpeg_of_size(n)
      local app = string.rep(img.jpeg_segment(0xE2, string.rep("\0", 65000)), 129)
      local base = #img.jpeg(100, 100, { app = app })
      return img.jpeg(100, 100, { app = app .. img.jpeg_segment(0xFE, string.rep("c", n - base - 4)) })
    end
    local over = jpeg_of_size(max + 1)
    assert.are.equal(max + 1, #over)
    for _, case in ipairs {
      { string.rep("\255", 9 * 1024 * 1024), "image/jpeg" },  -- past the route's limit: refused before it is read
      { over, "image/jpeg" },                                  -- within the request limit, over the file limit
      { "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n" .. over .. "\r\n--b--", "multipart/form-data; boundary=b" },
    } do
      local s, b, h = upload(case[1], case[2])
      assert.are.equal(413, s, b)
      problem(s, b, h, "payload_too_large")
    end
    assert.are.equal(before, count())
    -- exactly the limit is fine
    assert.are.equal(max, created(jpeg_of_size(max), "image/jpeg").sizeBytes)
  end)

  it("needs the uploads:write scope and a credential", function()
    local s, b, h = upload(img.png(1, 1), "image/png", { ["X-Api-Key"] = key_narrow })
    assert.are.equal(403, s)
    problem(s, b, h, "insufficient_scope")
    assert.matches('scope="uploads:write"', h["www-authenticate"], 1, true)
    s = sgw:request("POST", "/api/v1/uploads", { headers = { ["Content-Type"] = "image/png" }, body = img.png(1, 1) })
    assert.are.equal(401, s)
  end)

  it("honours Idempotency-Key: the same bytes again replay the first upload", function()
    local before = count()
    local png = img.png(2, 2)
    local s1, b1 = upload(png, "image/png", { ["Idempotency-Key"] = "upl-key-1" })
    local s2, b2, h2 = upload(png, "image/png", { ["Idempotency-Key"] = "upl-key-1" })
    assert.are.equal(201, s1)
    assert.are.equal(201, s2)
    assert.are.equal("true", h2["idempotent-replayed"])
    assert.are.equal(cjson.decode(b1).uploadId, cjson.decode(b2).uploadId)
    assert.are.equal(before + 1, count())
    local s3, b3, h3 = upload(img.png(3, 3), "image/png", { ["Idempotency-Key"] = "upl-key-1" })
    assert.are.equal(422, s3)
    problem(s3, b3, h3, "idempotency_key_reused")
  end)

  describe("an upload id", function()
    it("is found by its own company and environment only", function()
      local u = created(img.png(5, 5), "image/png")
      local mine = probe(u.uploadId)
      assert.is_true(mine.found)
      assert.are.same({ u.uploadId, "image/png", u.sizeBytes, 5, 5, u.sha256, u.createdAt },
        { mine.upload.id, mine.upload.mime_type, mine.upload.size_bytes, mine.upload.width, mine.upload.height,
          mine.upload.sha256, mine.upload.created_at })
      assert.is_nil(mine.upload.data)
      assert.is_false(probe(u.uploadId, key_b).found)        -- another company
      assert.is_false(probe(u.uploadId, key_a_live).found)   -- another environment
      assert.is_false(probe("upl_doesnotexist").found)
      assert.is_false(probe("acc_" .. u.uploadId:sub(5)).found)
    end)
  end)

  describe("the media URL", function()
    local u, bytes

    local function fetch(url)
      return sgw:request("GET", url:sub(#sgw.base_url + 1))
    end

    setup(function()
      bytes = img.jpeg(320, 240, { app = img.jpeg_segment(0xE1, "\0\1\2\r\n\255\0" .. string.rep("\0", 5000)) })
      u = created(bytes, "application/octet-stream")
    end)

    it("serves the exact bytes with their type, length and cache lifetime", function()
      local p = probe(u.uploadId, nil, 600)
      assert.is_nil(p.error)
      local pattern = "^" .. sgw.base_url:gsub("%p", "%%%0") .. "/media/" .. u.uploadId .. "%?exp=%d+&sig=[%w_-]+$"
      assert.matches(pattern, p.url)
      local status, body, headers = fetch(p.url)
      assert.are.equal(200, status)
      assert.are.equal(bytes, body)
      assert.are.equal("image/jpeg", headers["content-type"])
      assert.are.equal(tostring(#bytes), headers["content-length"])
      assert.are.equal("nosniff", headers["x-content-type-options"])
      assert.are.equal("6000", headers["x-ratelimit-limit"], "its own per-address limit")
      local max_age = tonumber(headers["cache-control"]:match("^private, max%-age=(%d+)$"))
      assert.is_true(max_age > 590 and max_age <= 600, headers["cache-control"])
      -- with the extension of its type; another type's extension is not it
      assert.are.equal(200, (fetch(p.url:gsub("/media/(upl_%w+)", "/media/%1.jpg"))))
      assert.are.equal(200, (fetch(p.url:gsub("/media/(upl_%w+)", "/media/%1.JPEG"))))
      assert.are.equal(404, (fetch(p.url:gsub("/media/(upl_%w+)", "/media/%1.png"))))
    end)

    it("is 404 when tampered with, incomplete, or for another upload", function()
      local url = probe(u.uploadId).url
      local other = created(img.png(1, 1), "image/png")
      local exp, sig = url:match("exp=(%d+)&sig=(.+)$")
      local flipped = sig:sub(1, -2) .. (sig:sub(-1) == "A" and "B" or "A")
      for _, path in ipairs {
        "/media/" .. u.uploadId .. "?exp=" .. exp .. "&sig=" .. flipped,
        "/media/" .. u.uploadId .. "?exp=" .. (exp + 1) .. "&sig=" .. sig,
        "/media/" .. u.uploadId .. "?exp=0" .. exp .. "&sig=" .. sig,
        "/media/" .. u.uploadId .. "?exp=" .. exp,
        "/media/" .. u.uploadId .. "?sig=" .. sig,
        "/media/" .. u.uploadId,
        "/media/" .. other.uploadId .. "?exp=" .. exp .. "&sig=" .. sig,
        "/media/upl_nothere?exp=" .. exp .. "&sig=" .. sig,
        "/media/..%2Fetc?exp=" .. exp .. "&sig=" .. sig,
      } do
        local s, b, h = sgw:request("GET", path)
        assert.are.equal(404, s, path)
        problem(s, b, h, "not_found")
      end
    end)

    it("is 404 once it has expired", function()
      local url = probe(u.uploadId, nil, 30).url
      assert.are.equal(200, (fetch(url)))
      assert.are.equal(200, (sgw:admin("POST", "/clock/advance?seconds=31")))
      assert.are.equal(404, (fetch(url)))
      assert.are.equal(200, (fetch(probe(u.uploadId).url)))  -- a new URL works
    end)

    it("is not made without crypto.encryption_key, and none verifies then", function()
      local url = probe(u.uploadId).url
      local keyless = stack.start_sgw {
        name = "uploads-keyless", database_url = sgw.database_url, migrate = false,
        set = { ["lua.root"] = make_root(), ["crypto.encryption_key"] = "" },
      }
      local status, p = keyless:json("GET", "/test/media/" .. u.uploadId, { headers = { ["X-Api-Key"] = key_a } })
      assert.are.equal(200, status)
      assert.is_nil(p.url)
      assert.matches("crypto.encryption_key", p.error, 1, true)
      assert.are.equal(404, (keyless:request("GET", url:sub(#sgw.base_url + 1))))
    end)
  end)
end)

describe("upload quota, storage and retention", function()
  local sgw

  local function start(db, extra)
    local set = { ["lua.root"] = make_root(), ["crypto.encryption_key"] = ENCRYPTION_KEY,
      ["api.rate_limit.per_minute"] = 100000 }
    for k, v in pairs(extra or {}) do set[k] = v end
    return stack.start_sgw { name = "uploads-quota", database_url = db, set = set }
  end

  local function key(inst, company, scopes)
    return cli(inst, { "client", "create", "--company", company, "--environment", "test",
      "--scopes", scopes or "uploads:write" }).apiKey
  end

  local function upload(inst, k, bytes)
    return inst:request("POST", "/api/v1/uploads", { headers = { ["X-Api-Key"] = k }, body = bytes })
  end

  teardown(function() stack.cleanup() end)

  it("refuses the upload that would take a company past its quota, and only that company", function()
    local jpeg = img.jpeg(64, 64)
    sgw = start(nil, { ["uploads.company_quota_bytes"] = #jpeg * 2 + 10 })
    local a = cli(sgw, { "company", "create", "--name", "Quota A" }).companyId
    local b = cli(sgw, { "company", "create", "--name", "Quota B" }).companyId
    local ka, kb = key(sgw, a), key(sgw, b)
    assert.are.equal(201, (upload(sgw, ka, jpeg)))
    assert.are.equal(201, (upload(sgw, ka, img.jpeg(64, 64))))
    local st, body, h = upload(sgw, ka, jpeg)
    assert.are.equal(413, st)
    local p = problem(st, body, h, "payload_too_large")
    assert.matches(("(%d bytes)"):format(#jpeg), p.detail, 1, true)
    assert.matches(("%d of %d bytes are in use"):format(#jpeg * 2, #jpeg * 2 + 10), p.detail, 1, true)
    assert.are.equal("2", stack.psql(sgw.database_url, "SELECT count(*) FROM uploads u JOIN api_clients c "
      .. "ON c.id = u.client_id WHERE c.company_id = '" .. a .. "'"))
    -- Another company has its own quota, and so has A's live environment:
    -- its sandbox full stops no live upload.
    assert.are.equal(201, (upload(sgw, kb, jpeg)))
    local live = cli(sgw, { "client", "create", "--company", a, "--environment", "live", "--scopes", "uploads:write" })
    assert.are.equal(201, (upload(sgw, live.apiKey, jpeg)))
    assert.are.equal(201, (upload(sgw, live.apiKey, img.jpeg(64, 64))))
    st, body, h = upload(sgw, live.apiKey, jpeg)
    assert.are.equal(413, st)
    assert.matches("live uploads", problem(st, body, h, "payload_too_large").detail, 1, true)
    assert(sgw:stop())
  end)

  it("moves the bytes of existing uploads out of the uploads table, and still serves them", function()
    -- A database as the previous version left it: migrations up to 0017.
    local db, out = stack.database_before("uploads_migrate", "0018")
    assert.is_nil(out:find("0020", 1, true), out)
    local bytes = img.jpeg(40, 30, { app = img.jpeg_segment(0xE1, "\0\1\2\r\n\255" .. string.rep("x", 3000)) })
    local hex = bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end)
    stack.psql(db, [[INSERT INTO companies (id, name) VALUES ('cmp_old', 'Old');
      INSERT INTO api_clients (id, company_id, environment, name, scopes, secret_hash)
        VALUES ('cli_old', 'cmp_old', 'test', 'old', '{uploads:write}', 'x');
      INSERT INTO uploads (id, company_id, environment, client_id, mime_type, size_bytes, width, height, sha256, data)
        VALUES ('upl_oldupload0000000000000000000000', 'cmp_old', 'test', 'cli_old', 'image/jpeg', ]] .. #bytes
      .. [[, 40, 30, 'x', decode(']] .. hex .. [[', 'hex'))]])

    sgw = start(db) -- migrates to the current version
    assert.are.equal("0", stack.psql(db, "SELECT count(*) FROM information_schema.columns "
      .. "WHERE table_name = 'uploads' AND column_name = 'data'"))
    local k = key(sgw, "cmp_old")
    local status, p = sgw:json("GET", "/test/media/upl_oldupload0000000000000000000000",
      { headers = { ["X-Api-Key"] = k } })
    assert.are.equal(200, status)
    local fetched_status, body, headers = stack.request("GET", p.url)
    assert.are.equal(200, fetched_status)
    assert.are.equal(bytes, body)
    assert.are.equal("image/jpeg", headers["content-type"])
  end)

  it("deletes what is past its retention, in batches, and keeps the rest", function()
    assert(sgw:stop())
    sgw = start(sgw.database_url, { ["retention.interval_seconds"] = 1, ["retention.batch_size"] = 2,
      ["retention.uploads_days"] = 30, ["retention.events_days"] = 30, ["retention.meta_deliveries_days"] = 30,
      ["retention.oauth_tokens_days"] = 7 })
    local db = sgw.database_url
    local company = cli(sgw, { "company", "create", "--name", "Retention" }).companyId
    local c = cli(sgw, { "client", "create", "--company", company, "--environment", "test",
      "--scopes", "uploads:write posts:write posts:read sandbox:write accounts:read" })
    local ids = {}
    for i = 1, 4 do
      local st, body = upload(sgw, c.apiKey, img.jpeg(16 + i, 16))
      assert.are.equal(201, st, body)
      ids[i] = cjson.decode(body).uploadId
    end
    -- Upload 1 is old and used by a post; 2 and 3 are old and unused; 4 is new.
    local _, acc = sgw:json("POST", "/api/v1/sandbox/accounts", { headers = { ["X-Api-Key"] = c.apiKey },
      body = { platform = "facebook", name = "Retention page" } })
    local st, post = sgw:json("POST", "/api/v1/posts", { headers = { ["X-Api-Key"] = c.apiKey,
      ["Idempotency-Key"] = "retention-" .. math.random(1, 1e9) }, body = {
      targets = { { socialAccountId = acc.id, platform = "facebook" } },
      content = { type = "image", message = "kept" }, media = { { source = "upload", uploadId = ids[1] } },
      publishing = { mode = "scheduled", scheduledAt = os.date("!%Y-%m-%dT%H:%M:%SZ", os.time() + 300 * 86400) } } })
    assert.are.equal(202, st, cjson.encode(post))
    local cid = c.clientId
    stack.psql(db, "UPDATE uploads SET created_at = now() - interval '31 days' WHERE id IN ('"
      .. ids[1] .. "', '" .. ids[2] .. "', '" .. ids[3] .. "');"
      .. "INSERT INTO access_tokens (token_hash, client_id, company_id, environment, scopes, expires_at) VALUES "
      .. "('old-token', '" .. cid .. "', '" .. company .. "', 'test', '{}', now() - interval '8 days'),"
      .. "('recent-token', '" .. cid .. "', '" .. company .. "', 'test', '{}', now() - interval '6 days'),"
      .. "('live-token', '" .. cid .. "', '" .. company .. "', 'test', '{}', now() + interval '1 hour');"
      .. "INSERT INTO meta_webhook_deliveries (body, received_at, processed_at) VALUES "
      .. "('old', now() - interval '31 days', now() - interval '31 days'),"
      .. "('recent', now() - interval '29 days', now() - interval '29 days'),"
      .. "('old-unprocessed', now() - interval '40 days', NULL);"
      .. "INSERT INTO events (id, company_id, environment, client_id, type, data, created_at) VALUES "
      .. "('evt_old1', '" .. company .. "', 'test', '" .. cid .. "', 't', '{}', now() - interval '31 days'),"
      .. "('evt_old2', '" .. company .. "', 'test', '" .. cid .. "', 't', '{}', now() - interval '32 days'),"
      .. "('evt_old3', '" .. company .. "', 'test', '" .. cid .. "', 't', '{}', now() - interval '33 days'),"
      .. "('evt_new', '" .. company .. "', 'test', '" .. cid .. "', 't', '{}', now() - interval '29 days');"
      .. "INSERT INTO webhook_deliveries (event_id, client_id, company_id, environment, attempt, url, outcome, duration_ms) "
      .. "SELECT id, client_id, company_id, environment, 1, 'https://example.com/', 'delivered', 5 FROM events "
      .. "WHERE id IN ('evt_old1', 'evt_old2', 'evt_old3', 'evt_new');"
      -- Workspace sessions and Facebook attempts go once they expire (an
      -- unfinished attempt holds Page tokens).
      .. "INSERT INTO users (id, company_id, email, password_hash) VALUES ('usr_ret', '" .. company
      .. "', 'retention@example.test', 'x');"
      .. "INSERT INTO workspace_sessions (id, user_id, company_id, expires_at) VALUES "
      .. "('ses_live', 'usr_ret', '" .. company .. "', now() + interval '1 day'),"
      .. "('ses_expired', 'usr_ret', '" .. company .. "', now() - interval '1 minute');"
      .. "INSERT INTO workspace_oauth_states (id, session_id, company_id, expires_at, returned_at, pages_enc) VALUES "
      .. "('state_live', 'ses_live', '" .. company .. "', now() + interval '10 minutes', NULL, NULL),"
      .. "('state_expired', 'ses_live', '" .. company .. "', now() - interval '1 minute', now(), 'sealed-pages')")
    local function ids_of(query) return stack.psql(db, query):gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "") end
    stack.eventually(function()
      return ids_of("SELECT count(*) FROM events WHERE id LIKE 'evt_old%'") == "0"
        and ids_of("SELECT count(*) FROM uploads WHERE id IN ('" .. ids[2] .. "', '" .. ids[3] .. "')") == "0"
    end, 30, 0.2, "old events and unused old uploads to be deleted")
    assert.are.equal("live-token recent-token", ids_of("SELECT string_agg(token_hash, ' ' ORDER BY token_hash) "
      .. "FROM access_tokens WHERE client_id = '" .. cid .. "' AND token_hash LIKE '%-token'"))
    assert.are.equal("old-unprocessed recent", ids_of("SELECT string_agg(body, ' ' ORDER BY body) "
      .. "FROM meta_webhook_deliveries WHERE body IN ('old', 'recent', 'old-unprocessed')"))
    assert.are.equal("evt_new", ids_of("SELECT string_agg(event_id, ' ') FROM webhook_deliveries "
      .. "WHERE event_id LIKE 'evt_old%' OR event_id = 'evt_new'"))
    assert.are.equal(table.concat({ ids[1], ids[4] }, " "), ids_of("SELECT string_agg(id, ' ' ORDER BY created_at) "
      .. "FROM uploads WHERE id IN ('" .. table.concat(ids, "', '") .. "')"))
    assert.are.equal("2", ids_of("SELECT count(*) FROM upload_bytes WHERE upload_id IN ('"
      .. table.concat(ids, "', '") .. "')"))
    stack.eventually(function()
      return ids_of("SELECT count(*) FROM workspace_oauth_states WHERE id = 'state_expired'") == "0"
        and ids_of("SELECT count(*) FROM workspace_sessions WHERE id = 'ses_expired'") == "0"
    end, 30, 0.2, "the expired session and Facebook attempt to be deleted")
    assert.are.equal("ses_live state_live", ids_of("SELECT (SELECT string_agg(id, ' ') FROM workspace_sessions "
      .. "WHERE user_id = 'usr_ret') || ' ' || (SELECT string_agg(id, ' ') FROM workspace_oauth_states "
      .. "WHERE session_id = 'ses_live')"))
  end)
end)

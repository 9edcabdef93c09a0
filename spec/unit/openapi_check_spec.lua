-- spec/support/openapi_check.py, which every integration spec runs on the
-- answers it saw: what it accepts and how it names what it refuses.
local cjson = require "cjson"

local function check(records)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  for _, r in ipairs(records) do
    r.contentType = r.contentType or (r.body and r.body ~= "" and "application/json" or "")
    f:write(cjson.encode(r), "\n")
  end
  f:close()
  local p = assert(io.popen("/usr/bin/python3 spec/support/openapi_check.py lib/openapi.json " .. path .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  os.remove(path)
  return ok == true, out
end

local PROBLEM = cjson.encode({ type = "/docs/errors#not_found", title = "Not found", status = 404,
  code = "not_found", requestId = "req_abc", detail = "No resource at this path." })

local function operation(type_, status, result)
  return cjson.encode({ id = "op_1", type = type_, status = status, resource = { type = "post", id = "post_1" },
    result = result or cjson.null, error = cjson.null, createdAt = "2026-01-01T00:00:00.000Z",
    updatedAt = "2026-01-01T00:00:00.000Z", completedAt = result and "2026-01-01T00:00:01.000Z" or cjson.null })
end

local POST_RESULT = { postId = "post_1", status = "published",
  targets = { { postTargetId = "tgt_1", status = "published", platformPostId = "1_2", error = cjson.null } } }

describe("the OpenAPI answer check", function()
  it("accepts documented answers, and leaves pages that are not API alone", function()
    local ok, out = check {
      { method = "GET", path = "/api/v1/operations/op_1", status = 200, body = operation("post.publish", "succeeded", POST_RESULT) },
      { method = "GET", path = "/api/v1/operations/op_1", status = 200, body = operation("comment.reply", "queued") },
      { method = "GET", path = "/api/v1/operations/op_2", status = 200,
        body = operation("comment.reply", "succeeded", { commentId = "cmt_1", platformCommentId = "9_8" }) },
      { method = "GET", path = "/api/v1/posts/post_1", status = 404, body = PROBLEM, contentType = "application/problem+json" },
      { method = "GET", path = "/api/v1/nothing-here", status = 404, body = PROBLEM, contentType = "application/problem+json" },
      { method = "GET", path = "/workspace/login", status = 200, body = "<html></html>", contentType = "text/html" },
    }
    assert.is_true(ok, out)
    assert.are.equal("", out)
  end)

  it("refuses an undocumented status, naming the operation", function()
    local ok, out = check {
      { method = "GET", path = "/api/v1/posts/post_1", status = 418, body = PROBLEM, contentType = "application/problem+json" },
    }
    assert.is_false(ok)
    assert.matches("getPost GET /api/v1/posts/{postId} -> 418: status 418 is not documented", out, 1, true)
  end)

  it("refuses a result that does not fit the operation's type, naming the pointer", function()
    local ok, out = check {
      { method = "GET", path = "/api/v1/operations/op_1", status = 200,
        body = operation("comment.reply", "succeeded", POST_RESULT) },
    }
    assert.is_false(ok)
    assert.matches("getOperation GET /api/v1/operations/{operationId} -> 200: at /result", out, 1, true)
    assert.matches("post_1", out, 1, true) -- the body is shown
  end)

  it("refuses an undocumented media type and a success answered to an unknown API path", function()
    local ok, out = check {
      { method = "GET", path = "/api/v1/posts/post_1", status = 404, body = "gone", contentType = "text/plain" },
      { method = "GET", path = "/api/v1/nothing-here", status = 200, body = "{}" },
    }
    assert.is_false(ok)
    assert.matches("media type 'text/plain' is not documented", out, 1, true)
    assert.matches("GET /api/v1/nothing-here (no such path) -> 200", out, 1, true)
  end)
end)

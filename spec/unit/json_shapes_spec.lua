-- lib/json_shapes: the key order of answers, events and problems comes from
-- the OpenAPI document (lib/openapi.json), as CONTRACT section 6 lists it.
require("fake_host").install()
local json = require "json"
local json_shapes = require "json_shapes"

local top_keys = require("json_keys").top

describe("json_shapes", function()
  it("orders a post and its targets as the contract lists them", function()
    local shape = json_shapes.response({ method = "GET", path = "/api/v1/posts/{postId}" }, 200)
    local text = json.encode({
      updatedAt = "u", targets = { { error = json.null, publishedAt = json.null, status = "queued", platform = "facebook",
        id = "tgt_1", socialAccountId = "acc_1", attempts = 0, nextAttemptAt = json.null, permalinkUrl = json.null,
        platformPostId = json.null } },
      createdAt = "c", media = json.array(), publishing = { mode = "immediate" }, status = "queued", id = "post_1",
      content = { message = "m", type = "text" }, externalReference = json.null,
    }, shape)
    assert.are.same({ "id", "status", "content", "media", "publishing", "externalReference", "createdAt", "updatedAt", "targets" },
      top_keys(text))
    assert.are.same({ "id", "socialAccountId", "platform", "status", "platformPostId", "permalinkUrl", "attempts",
      "nextAttemptAt", "publishedAt", "error" }, top_keys(text:match('"targets":%[(%b{})')))
  end)

  it("orders a page of posts through items", function()
    local shape = json_shapes.response({ method = "GET", path = "/api/v1/posts" }, 200)
    local text = json.encode({ nextCursor = json.null, data = { { status = "queued", id = "post_1" } } }, shape)
    assert.are.equal('{"data":[{"id":"post_1","status":"queued"}],"nextCursor":null}', text)
  end)

  it("orders problems by the Problem schema, also through a shared response", function()
    local p = { errors = json.array(), requestId = "req_1", code = "not_found", detail = "d", status = 404, title = "t",
      type = "/docs/errors#not_found" }
    local want = '{"type":"/docs/errors#not_found","title":"t","status":404,"detail":"d","code":"not_found","requestId":"req_1","errors":[]}'
    assert.are.equal(want, json.encode(p, json_shapes.schema("Problem")))
    assert.are.equal(want, json.encode(p, json_shapes.response({ method = "GET", path = "/api/v1/posts/{postId}" }, 404)))
  end)

  it("orders an event's data by its schema in webhooks, merging allOf", function()
    local text = json.encode({ externalReference = "ref", operationId = "op_1", targets = json.array(), status = "published",
      postId = "post_1" }, json_shapes.event_data("social.post.published"))
    assert.are.same({ "postId", "status", "targets", "operationId", "externalReference" }, top_keys(text))
    text = json.encode({ reply = { text = "hi", id = "cmt_2" }, commentId = "cmt_1", operationId = "op_1" },
      json_shapes.event_data("social.comment.replied"))
    assert.are.equal('{"operationId":"op_1","commentId":"cmt_1","reply":{"id":"cmt_2","text":"hi"}}', text)
  end)

  it("gives no shape for what the document does not describe", function()
    assert.is_nil(json_shapes.response({ method = "GET", path = "/no/such/path" }, 200))
    assert.is_nil(json_shapes.response(nil, 200))
    assert.is_nil(json_shapes.event_data("no.such.event"))
  end)

  it("reads oneOf, additionalProperties and key order from any document", function()
    json_shapes.use([[{"paths":{"/x":{"get":{"responses":{"200":{"content":{"application/json":{"schema":
      {"type":"object","properties":{"zz":{"oneOf":[{"properties":{"q":{},"p":{}}},{"properties":{"c":{},"b":{},"a":{}}}]},
       "map":{"additionalProperties":{"properties":{"y":{},"x":{}}}},
       "aa":{"type":"string"}}}}}}}}}}}]])
    local shape = json_shapes.response({ method = "GET", path = "/x" }, 200)
    assert.are.equal('{"zz":{"c":1,"b":2,"a":3},"map":{"k1":{"y":1,"x":2},"k2":{"y":3,"x":4}},"aa":"/","other":true}',
      json.encode({ other = true, aa = "/", map = { k2 = { x = 4, y = 3 }, k1 = { x = 2, y = 1 } }, zz = { a = 3, b = 2, c = 1 } }, shape))
    assert.has_error(function() json_shapes.use('{"a":') end)
  end)
end)

-- The fake Graph API's comments (spec/support/fake_graph_comments.py) keep
-- Meta's shapes and refusals, and sign the webhook deliveries they send the
-- way Meta does, so that sgw's specs against it mean something.
local stack = require "stack"
local fake_graph = require "fake_graph"
local cjson = require "cjson"

local SECRET = "fake-app-secret"

describe("fake Graph API comments", function()
  local fake, page, post, receiver_port, receiver_pid

  -- A receiver that records the first POST it gets (bytes and headers), then
  -- exits; connections without a request (the readiness probe) are ignored.
  local function start_receiver()
    receiver_port = stack.free_port()
    local out = os.tmpname()
    local code, pid = stack.sh("python3 -c " .. stack.shell_quote([[
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        open(sys.argv[2], "w").write(json.dumps({"body": body.decode(), "signature": self.headers["X-Hub-Signature-256"]}))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
        self.server.got = True
    def log_message(self, *a): pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
server.got = False
while not server.got:
    server.handle_request()
]]) .. " " .. receiver_port .. " " .. out .. " > /dev/null 2>&1 & echo $!")
    assert(code == 0)
    receiver_pid = tonumber(pid:match("%d+"))
    stack.wait_port(receiver_port, "the webhook receiver")
    return out
  end

  setup(function() fake = fake_graph.start() end)
  teardown(function()
    if receiver_pid then os.execute("kill " .. receiver_pid .. " 2>/dev/null") end
    fake.stop()
  end)

  before_each(function()
    fake.reset()
    page = fake.add_page({ name = "Shop", instagram_business_account = true })
    local _, created = fake.graph("POST", "/" .. page.id .. "/feed", { message = "A post" }, page.access_token)
    post = created.id
  end)

  it("delivers a signed page feed change in Meta's shape", function()
    local out = start_receiver()
    fake.control("POST", "webhooks", { callback_url = "http://127.0.0.1:" .. receiver_port .. "/hook", app_secret = SECRET })
    local made = fake.control("POST", "comments", { post_id = post, message = "Grüße", from = { id = "42", name = "Ann" } })
    assert.are.equal(200, made.delivery.status)
    local f = assert(io.open(out))
    local got = cjson.decode(f:read("a"))
    f:close()
    os.remove(out)
    assert.truthy(got.body:find("Gr\\u00fc\\u00dfe", 1, true), "non-ASCII escaped as Meta does")
    local code, hex = stack.sh("printf %s " .. stack.shell_quote(got.body) .. " | openssl dgst -sha256 -hmac "
      .. SECRET .. " -r")
    assert(code == 0)
    assert.are.equal("sha256=" .. hex:match("^(%x+)"), got.signature)
    local value = cjson.decode(got.body).entry[1].changes[1].value
    assert.are.same({ "comment", "add", post, post, made.comment.id, "Grüße", "42" },
      { value.item, value.verb, value.post_id, value.parent_id, value.comment_id, value.message, value.from.id })
    assert.matches("^" .. post:match("_(%d+)$") .. "_%d+$", made.comment.id)
  end)

  it("lists comments with cursors, top level or the whole stream, and refuses to hide the Page's own", function()
    local top = fake.control("POST", "comments", { post_id = post, message = "Top", deliver = false }).comment
    fake.control("POST", "comments", { post_id = post, message = "Reply", parent_id = top.id, deliver = false })
    local _, stream = fake.graph("GET", "/" .. post .. "/comments", { filter = "stream", limit = 1,
      fields = "id,message,parent{id}" }, page.access_token)
    assert.are.equal("Top", stream.data[1].message)
    assert.is_string(stream.paging.next)
    local _, second = fake.graph("GET", "/" .. post .. "/comments", { filter = "stream", limit = 1,
      fields = "id,message,parent{id}", after = stream.paging.cursors.after }, page.access_token)
    assert.are.same({ "Reply", top.id }, { second.data[1].message, second.data[1].parent.id })
    assert.is_nil(second.paging.next)
    local _, toplevel = fake.graph("GET", "/" .. post .. "/comments", {}, page.access_token)
    assert.are.equal(1, #toplevel.data)

    local _, own = fake.graph("POST", "/" .. top.id .. "/comments", { message = "Thanks" }, page.access_token)
    local status, refused = fake.graph("POST", "/" .. own.id, { is_hidden = "true" }, page.access_token)
    assert.are.equal(400, status)
    assert.are.equal(100, refused.error.code)
    assert.matches("own comments", refused.error.message)
    assert.are.same({ success = true }, select(2, fake.graph("DELETE", "/" .. own.id, {}, page.access_token)))
    status, refused = fake.graph("GET", "/" .. own.id, {}, page.access_token)
    assert.are.same({ 400, 100, 33 }, { status, refused.error.code, refused.error.error_subcode })
  end)

  it("takes Instagram replies to top-level comments only", function()
    local ig = page.instagram_business_account.id
    local _, container = fake.graph("POST", "/" .. ig .. "/media", { image_url = fake.asset("tiny.jpg"), caption = "x" },
      page.access_token)
    local media
    stack.eventually(function()
      local status, body = fake.graph("POST", "/" .. ig .. "/media_publish", { creation_id = container.id }, page.access_token)
      media = status == 200 and body.id
      return media
    end, 10, 0.1, "the media to publish")
    local c = fake.control("POST", "comments", { media_id = media, text = "Nice", deliver = false }).comment
    assert.matches("^%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d$", c.id)
    local _, reply = fake.graph("POST", "/" .. c.id .. "/replies", { message = "Thanks" }, page.access_token)
    local status, refused = fake.graph("POST", "/" .. reply.id .. "/replies", { message = "Again" }, page.access_token)
    assert.are.same({ 400, 100 }, { status, refused.error.code })
    assert.matches("top%-level", refused.error.message)
    local _, listed = fake.graph("GET", "/" .. media .. "/comments",
      { fields = "id,text,hidden,replies{id,text,from{id,username}}" }, page.access_token)
    assert.are.same({ "Nice", "Thanks", ig }, { listed.data[1].text, listed.data[1].replies.data[1].text,
      listed.data[1].replies.data[1].from.id })
  end)
end)

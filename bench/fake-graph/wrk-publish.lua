-- wrk script: what sgw's Facebook adapter sends for one target, again and
-- again: POST /{page}/feed with a message no other request has, then
-- GET /{post}?fields=permalink_url. Measures the fake Graph API alone
-- (bench/run-publish). Two requests make one target.
--
--   FAKE_PAGE=<page id> FAKE_TOKEN=<its token> FAKE_POST=<a post of it> FAKE_VERSION=v21.0 \
--     wrk -t2 -c1000 -d10s -s bench/fake-graph/wrk-publish.lua http://127.0.0.1:PORT
local page, token, post = os.getenv("FAKE_PAGE"), os.getenv("FAKE_TOKEN"), os.getenv("FAKE_POST")
local version = os.getenv("FAKE_VERSION") or "v21.0"

local threads = {}
local id, n = 0, 0

function setup(thread)
  thread:set("id", #threads + 1)
  threads[#threads + 1] = thread
end

function init()
  id = tonumber(wrk.thread:get("id")) or 0
end

local feed = "/" .. version .. "/" .. page .. "/feed"
local permalink = "/" .. version .. "/" .. post .. "?fields=permalink_url&access_token=" .. token
local form = { ["Content-Type"] = "application/x-www-form-urlencoded" }

function request()
  n = n + 1
  if n % 2 == 1 then
    return wrk.format("POST", feed, form, ("message=Rate+%d-%d&access_token=%s"):format(id, n, token))
  end
  return wrk.format("GET", permalink)
end

#!/usr/bin/env python3
"""Checks a running bench fake Graph API (bench/fake-graph) against what sgw's
publishing relies on. Run by bench/fake-graph/self-test, which starts the fake.

    python3 bench/fake-graph/self_test.py http://127.0.0.1:PORT [version]

Prints one line per check and "N passed, N failed" last; exits 1 on a failure.
"""
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

BASE = sys.argv[1].rstrip("/")
VERSION = sys.argv[2] if len(sys.argv) > 2 else "v21.0"
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok    %s" % name)
    else:
        failed += 1
        print("FAIL  %s %s" % (name, detail))


def call(method, path, params=None, body=None, headers=None):
    """(status, decoded JSON or None, headers)."""
    url = BASE + path
    data = None
    if method == "GET" and params:
        url += "?" + urllib.parse.urlencode(params)
    elif params is not None:
        data = urllib.parse.urlencode(params).encode()
    if body is not None:
        data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if params is not None and method != "GET":
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw, status, hdrs = resp.read(), resp.status, resp.headers
    except urllib.error.HTTPError as e:
        raw, status, hdrs = e.read(), e.code, e.headers
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    return status, value, hdrs


def graph(method, path, params=None, **kw):
    return call(method, "/" + VERSION + path, params, **kw)


def err_code(value):
    e = (value or {}).get("error") or {}
    return (e.get("code"), e.get("error_subcode"))


status, health, _ = call("GET", "/_fake/health")
check("health answers with the served version", status == 200 and health.get("version") == VERSION, health)
workers = health.get("workers") if health else 0

_, page, _ = call("POST", "/_fake/pages", body={"name": "Self-test page", "instagram_business_account": True})
_, other, _ = call("POST", "/_fake/pages", body={"name": "Other page"})
pid, tok = page["id"], page["access_token"]
ig = page["instagram_business_account"]["id"]
check("a Page with an Instagram account is made", pid.isdigit() and ig.isdigit() and tok, page)

# Tokens, as Meta judges them.
status, value, _ = graph("POST", "/%s/feed" % pid, {"message": "no token"})
check("no token: 400, code 104", status == 400 and err_code(value) == (104, None), value)
status, value, hdrs = graph("POST", "/%s/feed" % pid, {"message": "bad token", "access_token": "nope"})
check("unknown token: 400, 190/467 and WWW-Authenticate", status == 400 and err_code(value) == (190, 467)
      and "invalid_token" in (hdrs.get("WWW-Authenticate") or ""), value)
status, value, _ = graph("POST", "/%s/feed" % pid, {"message": "foreign", "access_token": other["access_token"]})
check("another Page's token cannot post: 403, code 200", status == 403 and err_code(value) == (200, None), value)
e = (value or {}).get("error") or {}
check("errors have Meta's shape", all(k in e for k in ("message", "type", "code", "is_transient", "fbtrace_id")), e)
status, value, _ = graph("GET", "/%s" % pid, {"access_token": tok}, headers={})
status2, value2, _ = call("GET", "/v1.0/%s" % pid, {"access_token": tok})
check("another Graph version is refused with 2635", status2 == 400 and err_code(value2)[0] == 2635, value2)

# Facebook: a feed post, its permalink, the listing sgw resolves lost answers with.
status, post, hdrs = graph("POST", "/%s/feed" % pid, {"message": "Hello from the self-test", "access_token": tok})
check("POST /{page}/feed answers {id: <page>_<post>}", status == 200 and
      str(post.get("id", "")).startswith(pid + "_"), post)
app_usage = json.loads(hdrs.get("X-App-Usage") or "null")
buc = json.loads(hdrs.get("X-Business-Use-Case-Usage") or "null")
check("usage headers as Meta sends them", isinstance(app_usage, dict) and "call_count" in app_usage
      and isinstance(buc, dict) and buc.get(pid, [{}])[0].get("type") == "pages"
      and hdrs.get("facebook-api-version") == VERSION, (app_usage, buc))
status, value, _ = graph("POST", "/%s/feed" % pid, {"message": "Hello from the self-test", "access_token": tok})
check("the same status twice in a row: 506", status == 400 and err_code(value) == (506, None), value)
status, value, _ = graph("GET", "/%s" % post["id"], {"fields": "permalink_url", "access_token": tok})
check("GET /{post}?fields=permalink_url", status == 200 and value.get("permalink_url") ==
      "https://www.facebook.com/%s/posts/%s" % (pid, post["id"].split("_")[1]), value)
status, value, _ = graph("GET", "/%s/published_posts" % pid,
                         {"fields": "id,message,created_time,from{id}", "access_token": tok})
items = (value or {}).get("data") or []
check("GET /{page}/published_posts lists it, newest first", status == 200 and items
      and items[0]["id"] == post["id"] and items[0]["message"] == "Hello from the self-test"
      and items[0]["from"] == {"id": pid}, value)
status, value, _ = graph("GET", "/%s/published_posts" % pid, {"since": int(time.time()) + 3600, "access_token": tok})
check("since in the future: an empty data list", status == 200 and value == {"data": []}, value)
status, photo, _ = graph("POST", "/%s/photos" % pid, {"url": "https://example.invalid/a.jpg", "caption": "A photo",
                                                       "access_token": tok})
check("POST /{page}/photos answers {id, post_id}", status == 200 and photo.get("id") and
      str(photo.get("post_id", "")).startswith(pid + "_"), photo)

# Instagram: quota, container, status until FINISHED, media_publish once.
call("POST", "/_fake/config", body={"container_ready_ms": 400})
status, value, _ = graph("GET", "/%s/content_publishing_limit" % ig, {"fields": "quota_usage,config", "access_token": tok})
entry = ((value or {}).get("data") or [{}])[0]
check("content_publishing_limit: quota_usage 0 and config", status == 200 and entry.get("quota_usage") == 0
      and entry.get("config", {}).get("quota_total", 0) > 0, value)
status, container, _ = graph("POST", "/%s/media" % ig, {"image_url": "https://example.invalid/b.jpg",
                                                         "caption": "An Instagram caption", "access_token": tok})
cid = (container or {}).get("id")
check("POST /{ig-user}/media answers a container id", status == 200 and cid, container)
status, value, hdrs = graph("GET", "/%s" % cid, {"fields": "status_code,status", "access_token": tok})
check("a new container is IN_PROGRESS", value.get("status_code") == "IN_PROGRESS" and value.get("status"), value)
check("Instagram calls report Instagram usage",
      json.loads(hdrs.get("X-Business-Use-Case-Usage") or "{}").get(ig, [{}])[0].get("type") == "instagram")
status, value, _ = graph("POST", "/%s/media_publish" % ig, {"creation_id": cid, "access_token": tok})
check("media_publish too early: 9007/2207027", status == 400 and err_code(value) == (9007, 2207027), value)
deadline, code = time.monotonic() + 5, None
while time.monotonic() < deadline:
    code = graph("GET", "/%s" % cid, {"fields": "status_code", "access_token": tok})[1].get("status_code")
    if code != "IN_PROGRESS":
        break
    time.sleep(0.05)
check("the container becomes FINISHED", code == "FINISHED", code)
status, media, _ = graph("POST", "/%s/media_publish" % ig, {"creation_id": cid, "access_token": tok})
check("media_publish answers a media id", status == 200 and (media or {}).get("id"), media)
status, value, _ = graph("POST", "/%s/media_publish" % ig, {"creation_id": cid, "access_token": tok})
check("a container publishes once: 9007/2207008", status == 400 and err_code(value) == (9007, 2207008), value)
status, value, _ = graph("GET", "/%s" % cid, {"fields": "status_code", "access_token": tok})
check("the container is PUBLISHED", value.get("status_code") == "PUBLISHED", value)
status, value, _ = graph("GET", "/%s/media" % ig, {"fields": "id,caption,timestamp", "access_token": tok})
check("GET /{ig-user}/media lists the media", status == 200 and value["data"][0]["id"] == media["id"]
      and value["data"][0]["caption"] == "An Instagram caption", value)
status, value, _ = graph("GET", "/%s" % media["id"], {"fields": "permalink", "access_token": tok})
check("GET /{media}?fields=permalink", str(value.get("permalink", "")).startswith("https://www.instagram.com/p/"), value)
status, value, _ = graph("GET", "/%s/content_publishing_limit" % ig, {"fields": "quota_usage", "access_token": tok})
check("the publish counts in quota_usage", value["data"][0] == {"quota_usage": 1}, value)

_, rec, _ = call("GET", "/_fake/published")
check("the fake's record: 3 publishes, each once", rec["total"] == 3 and rec["distinct"] == 3 and rec["repeated"] == 0
      and rec["counts"] == {pid: 2, ig: 1}, rec)
_, cont, _ = call("GET", "/_fake/instagram/containers")
check("the container record counts its status polls", cont["count"] == 1 and cont["published"] == 1
      and cont["data"][0]["polls"] >= 3, cont)

# Records are shared by every worker: many new connections, each one post.
seen_workers = set()
lock = threading.Lock()


def one_post(i, out):
    s, v, h = graph("POST", "/%s/feed" % pid, {"message": "Spread %d" % i, "access_token": tok})
    with lock:
        out.append(s)
        seen_workers.add(h.get("x-fake-worker"))


codes = []
threads = [threading.Thread(target=one_post, args=(i, codes)) for i in range(200)]
for t in threads:
    t.start()
for t in threads:
    t.join()
_, rec, _ = call("GET", "/_fake/published", {"summary": "1"})
check("200 posts over new connections: all recorded once (%d workers answered)" % len(seen_workers),
      codes.count(200) == 200 and rec["total"] == 203 and rec["distinct"] == 203 and rec["repeated"] == 0
      and (workers < 2 or len(seen_workers) >= 2), (codes.count(200), rec, seen_workers))

# Latency without a thread per request: 400 calls waiting 500 ms at once.
call("POST", "/_fake/config", body={"latency_ms": 500})
results = []


def one_read():
    t0 = time.monotonic()
    s, _, _ = graph("GET", "/%s" % post["id"], {"fields": "permalink_url", "access_token": tok})
    with lock:
        results.append((s, time.monotonic() - t0))


threads = [threading.Thread(target=one_read) for _ in range(400)]
t0 = time.monotonic()
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.monotonic() - t0
slowest = max(d for _, d in results)
check("400 calls at 500 ms latency at once: all answered within 5 s (took %.2f s, each >= 0.5 s)" % elapsed,
      all(s == 200 for s, _ in results) and elapsed < 5.0 and min(d for _, d in results) >= 0.49,
      (elapsed, slowest))
call("POST", "/_fake/config", body={"latency_ms": 0})

status, _, _ = call("POST", "/_fake/reset")
_, rec, _ = call("GET", "/_fake/published")
check("reset forgets what was published", status == 200 and rec["total"] == 0 and rec["data"] == [], rec)

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)

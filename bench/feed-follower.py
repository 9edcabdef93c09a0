#!/usr/bin/env python3
"""Follower of bench/run-feed: follows GET /api/v1/comments/changes?limit=100
on one keep-alive connection, as fast as it can, until it has seen `until`
changes in all (or has waited `deadline` seconds), checking that sequences
come once each and in order with no gap. Prints one JSON line.

    feed-follower.py BASE_URL API_KEY CURSOR UNTIL DEADLINE [LAST_SEQUENCE]

CURSOR "" starts at the oldest change; LAST_SEQUENCE, the last one a
previous follower saw at CURSOR, makes the first one checked too.
"""
import http.client, json, sys, time, urllib.parse

base, key, cursor, until, deadline = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
last = int(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[6] not in ("", "-") else None
url = urllib.parse.urlsplit(base)
conn = http.client.HTTPConnection(url.hostname, url.port)
seen, requests, empty, problems, busy = 0, 0, 0, [], 0.0
cursor_given = bool(cursor)
start = time.monotonic()
while seen < until and time.monotonic() - start < deadline:
    path = "/api/v1/comments/changes?limit=100" + ("&cursor=" + cursor if cursor else "")
    t = time.monotonic()
    conn.request("GET", path, headers={"X-Api-Key": key})
    answer = conn.getresponse()
    body = answer.read()
    busy += time.monotonic() - t
    requests += 1
    if answer.status != 200:
        problems.append("status %d: %s" % (answer.status, body[:200]))
        break
    page = json.loads(body)
    for change in page["data"]:
        s = change["sequence"]
        if (last is None and s != 1 and not cursor_given) or (last is not None and s != last + 1):
            problems.append("sequence %s after %s" % (s, last))
        last = s
    if not page["data"]:
        empty += 1
    seen += len(page["data"])
    cursor = page["nextCursor"]
elapsed = time.monotonic() - start
print(json.dumps({"changes": seen, "seconds": round(elapsed, 3), "per_s": round(seen / elapsed) if elapsed else 0,
                  "requests": requests, "empty_pages": empty, "waiting_on_sgw_s": round(busy, 3),
                  "last_sequence": last, "cursor": cursor, "problems": problems[:10]}))

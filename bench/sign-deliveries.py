#!/usr/bin/env python3
"""Signed Meta webhook deliveries for bench/run-comments and bench/run-scale.

  sign-deliveries.py SECRET PAGE_ID POSTS_FILE DELIVERIES BATCH FIRST > FILE

One delivery per line, "sha256=<hex>\t<body>" (what bench/wrk-meta-deliveries.lua
posts): DELIVERIES deliveries of BATCH new page comments each, on the platform
post ids of POSTS_FILE (whitespace-separated) in turn, comments numbered from
FIRST + 1 so that another call with a higher FIRST makes comments not yet stored.
"""
import hashlib, hmac, json, sys, time

secret, page, posts_file, deliveries, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
posts = open(posts_file).read().split()
now, n = int(time.time()) - 86400, int(sys.argv[6])
for d in range(deliveries):
    changes = []
    for _ in range(batch):
        n += 1
        post = posts[n % len(posts)]
        changes.append({"field": "feed", "value": {
            "from": {"id": str(10**14 + n), "name": "Commenter %d" % n}, "post_id": post,
            "comment_id": "%s_%d" % (post.split("_")[1], n), "parent_id": post, "created_time": now + n,
            "item": "comment", "verb": "add", "message": "Bench comment number %d, with a few words in it." % n}})
    body = json.dumps({"object": "page", "entry": [{"id": page, "time": now + n, "changes": changes}]},
                      separators=(",", ":"))
    sig = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    print("sha256=%s\t%s" % (sig, body))

#!/usr/bin/env python3
"""Publish a post through sgw and follow it to its final status.

    SGW_BASE_URL=http://127.0.0.1:8080 SGW_API_KEY=sgk_test_... python3 publish_and_follow.py [image.jpg]

Lists the company's social accounts, uploads the image if one is given (an
image post to every account) or else posts text (to the Facebook Pages), and
polls the operation until the post is final, honouring Retry-After. Prints
the final status and each target's permalink. Exits 1 unless the post was
published.
"""
import os
import sys
import time
import uuid

import requests

BASE = os.environ.get("SGW_BASE_URL", "http://127.0.0.1:8080").rstrip("/")
KEY = os.environ.get("SGW_API_KEY")
DEADLINE_SECONDS = float(os.environ.get("SGW_DEADLINE_SECONDS", "120"))
FINAL_OPERATION = {"succeeded", "failed", "cancelled"}


class ApiError(Exception):
    """An RFC 9457 problem from sgw, readable."""

    def __init__(self, response):
        self.status = response.status_code
        self.retry_after = response.headers.get("Retry-After")
        try:
            problem = response.json()
        except ValueError:
            problem = {"title": response.text[:200]}
        self.problem = problem
        lines = [f"{self.status} {problem.get('code', '')}: {problem.get('detail') or problem.get('title')}"]
        for err in problem.get("errors") or []:
            lines.append(f"  {err.get('field', '')} {err.get('code', '')}: {err.get('message', '')}")
        if problem.get("requestId"):
            lines.append(f"  (requestId {problem['requestId']})")
        super().__init__("\n".join(lines))


session = requests.Session()
session.headers["X-Api-Key"] = KEY or ""


def call(method, path, **kwargs):
    response = session.request(method, BASE + path, timeout=30, **kwargs)
    if response.status_code >= 400:
        raise ApiError(response)
    return response


def follow(operation_id):
    """Polls the operation with growing delays (Retry-After wins) until it is final."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    delay = 0.5
    while True:
        try:
            response = call("GET", f"/api/v1/operations/{operation_id}")
            operation = response.json()
            if operation["status"] in FINAL_OPERATION:
                return operation
            wait = float(response.headers.get("Retry-After") or delay)
            print(f"operation {operation_id}: {operation['status']}", flush=True)
        except ApiError as e:
            if e.status not in (429, 503):
                raise
            wait = float(e.retry_after or delay)
            print(f"sgw says {e.status}; trying again in {wait:g} s", flush=True)
        if time.monotonic() + wait > deadline:
            raise SystemExit(f"gave up: operation {operation_id} not final after {DEADLINE_SECONDS:g} s")
        time.sleep(wait)
        delay = min(delay * 2, 10)


def main():
    if not KEY:
        raise SystemExit("set SGW_API_KEY (and SGW_BASE_URL): see examples/README.md")
    image = sys.argv[1] if len(sys.argv) > 1 else None

    accounts = [a for a in call("GET", "/api/v1/social-accounts").json()["data"] if a["status"] == "active"]
    for a in accounts:
        print(f"account {a['id']}: {a['platform']} {a['name']}")
    if image:
        with open(image, "rb") as f:
            upload = call("POST", "/api/v1/uploads", data=f.read(), headers={"Content-Type": "image/jpeg"}).json()
        print(f"uploaded {upload['uploadId']}")
        targets = accounts
        content = {"type": "image", "message": "Hello from the Python example"}
        media = [{"source": "upload", "uploadId": upload["uploadId"]}]
    else:
        targets = [a for a in accounts if a["platform"] == "facebook"]
        content = {"type": "text", "message": "Hello from the Python example"}
        media = []
    if not targets:
        raise SystemExit("no active account to post to (a text post needs a Facebook Page)")

    body = {
        "targets": [{"socialAccountId": a["id"], "platform": a["platform"]} for a in targets],
        "content": content,
        "media": media,
        "publishing": {"mode": "immediate"},
    }
    # One key per post: sending the same request again (after a timeout, say)
    # cannot publish twice.
    accepted = call("POST", "/api/v1/posts", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}).json()
    post_id = accepted["resource"]["postId"]
    print(f"post {post_id} accepted, operation {accepted['operationId']}", flush=True)

    follow(accepted["operationId"])
    post = call("GET", f"/api/v1/posts/{post_id}").json()
    print(f"final status: {post['status']}")
    for t in post["targets"]:
        error = t.get("error") or {}
        print(f"target {t['id']} {t['platform']} {t['status']} permalink: {t.get('permalinkUrl') or '-'}"
              + (f" error: {error.get('code')}: {error.get('message')}" if error else ""))
    return 0 if post["status"] == "published" else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ApiError as e:
        print(f"sgw refused: {e}", file=sys.stderr)
        sys.exit(2)
    except requests.RequestException as e:
        print(f"cannot reach sgw at {BASE}: {e}", file=sys.stderr)
        sys.exit(2)

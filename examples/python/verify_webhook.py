#!/usr/bin/env python3
"""Receive sgw's events and verify their Standard Webhooks signatures.

    SGW_WEBHOOK_SECRET=whsec_... python3 verify_webhook.py [port]      (default port 8765)

Give the client the webhook URL http://<this host>:<port>/hook (sgw client
create --webhook-url, or the workspace). Each event whose signature checks
out is answered 204 and printed as "verified <type> <id>"; anything else is
refused with 400 and printed as "refused: <reason>". The check is written
out by hand from the Standard Webhooks spec: HMAC-SHA256 over
"<webhook-id>.<webhook-timestamp>.<body>" with the secret's bytes, compared in
constant time, and a timestamp at most five minutes from now (so a captured
delivery cannot be replayed later).
"""
import base64
import binascii
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_SECONDS = 5 * 60
MAX_BODY = 1024 * 1024


class BadSignature(Exception):
    pass


def verify(secret, headers, body):
    """Returns the event when the delivery is sgw's, unchanged and recent; raises BadSignature otherwise."""
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not (msg_id and timestamp and signatures):
        raise BadSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        sent = int(timestamp)
    except ValueError:
        raise BadSignature("webhook-timestamp is not a number") from None
    if abs(time.time() - sent) > TOLERANCE_SECONDS:
        raise BadSignature("webhook-timestamp is more than five minutes away from now")
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except binascii.Error:
        raise SystemExit("SGW_WEBHOOK_SECRET is not a whsec_ secret") from None
    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    # Several signatures may be sent (while a secret is being rotated): one match is enough.
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return json.loads(body)
    raise BadSignature("no signature matches")


def make_handler(secret):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def answer(self, status, text=""):
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                return self.answer(413, "too large\n")
            body = self.rfile.read(length)
            try:
                event = verify(secret, self.headers, body)
            except (BadSignature, ValueError) as e:
                print(f"refused: {e}", flush=True)
                return self.answer(400, f"{e}\n")
            print(f"verified {event.get('type')} {event.get('id')}", flush=True)
            self.answer(204)

    return Handler


def main():
    secret = os.environ.get("SGW_WEBHOOK_SECRET", "")
    if not secret.startswith("whsec_"):
        raise SystemExit("set SGW_WEBHOOK_SECRET to the client's whsec_ secret: see examples/README.md")
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8765
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(secret))
    print(f"listening on http://127.0.0.1:{port}/hook", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass

#!/usr/bin/env python3
"""A webhook receiver for the event specs, independent of sgw.

Every POST outside /_control/ is a delivery: its Standard Webhooks signature is
checked with this file's own implementation (HMAC-SHA256 keyed with the bytes
of the secret after "whsec_", over "<webhook-id>.<webhook-timestamp>.<body>",
compared in constant time, timestamp within 5 minutes), it is recorded, and it
is answered as configured.

    webhook_receiver.py --port P [--secret whsec_...] [--owner PID]

Control (JSON):
    GET  /_control/health       200
    POST /_control/config       {"secret", "fail": n, "failStatus": 500, "gone": bool,
                                 "hang": n, "hangSeconds": s}; answers the settings
    GET  /_control/deliveries   {"data": [delivery, ...]} oldest first

Each delivery is answered, in this order: the next `hang` ones after waiting
`hangSeconds` with 500; the next `fail` ones with `failStatus`; everything with
410 while `gone`; a bad signature with 401; otherwise 204. A recorded delivery:
{"path", "id", "timestamp", "signature", "contentType", "body", "verified",
"reason", "status", "receivedAt"}.
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_SECONDS = 5 * 60

lock = threading.Lock()
settings = {"secret": None, "fail": 0, "failStatus": 500, "gone": False, "hang": 0, "hangSeconds": 10}
deliveries = []


def verify(secret, msg_id, timestamp, signature_header, body):
    """Standard Webhooks verification; returns (ok, reason)."""
    if not secret or not secret.startswith("whsec_"):
        return False, "no secret configured"
    if not msg_id or not timestamp or not signature_header:
        return False, "missing webhook-id, webhook-timestamp or webhook-signature"
    try:
        ts = int(timestamp)
    except ValueError:
        return False, "timestamp is not an integer"
    if abs(time.time() - ts) > TOLERANCE_SECONDS:
        return False, "timestamp outside the tolerance"
    key = base64.b64decode(secret[len("whsec_"):])
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
    for candidate in signature_header.split(" "):
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected):
            return True, None
    return False, "no signature matches"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, value=None):
        body = b"" if value is None else json.dumps(value).encode()
        self.send_response(status)
        if value is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):
        if self.path == "/_control/health":
            return self.answer(200, {"ok": True})
        if self.path == "/_control/deliveries":
            with lock:
                return self.answer(200, {"data": list(deliveries)})
        return self.answer(404, {"error": "not found"})

    def do_POST(self):
        body = self.read_body()
        if self.path == "/_control/config":
            with lock:
                settings.update(json.loads(body or b"{}"))
                return self.answer(200, dict(settings))
        h = self.headers
        with lock:
            ok, reason = verify(settings["secret"], h.get("webhook-id"), h.get("webhook-timestamp"),
                                h.get("webhook-signature"), body)
            hang = settings["hang"] > 0
            if hang:
                settings["hang"] -= 1
                status = 500
            elif settings["fail"] > 0:
                settings["fail"] -= 1
                status = settings["failStatus"]
            elif settings["gone"]:
                status = 410
            else:
                status = 204 if ok else 401
            deliveries.append({
                "path": self.path, "id": h.get("webhook-id"), "timestamp": h.get("webhook-timestamp"),
                "signature": h.get("webhook-signature"), "contentType": h.get("Content-Type"),
                "body": body.decode("utf-8", "replace"), "verified": ok, "reason": reason,
                "status": status, "receivedAt": time.time(),
            })
            wait = settings["hangSeconds"] if hang else 0
        if wait:
            time.sleep(wait)
        try:
            self.answer(status)
        except OSError:
            pass  # the sender has gone (a spec killed it while we hung)


def watch_owner(pid):
    """Exits when the process that started us is gone (a spec runner that died)."""
    while True:
        try:
            os.kill(pid, 0)
        except OSError:
            os._exit(0)
        time.sleep(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--secret")
    p.add_argument("--owner", type=int)
    args = p.parse_args()
    settings["secret"] = args.secret
    if args.owner:
        threading.Thread(target=watch_owner, args=(args.owner,), daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()

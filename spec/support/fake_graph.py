#!/usr/bin/env python3
"""A fake of Meta's Graph API (Facebook Pages, Instagram content publishing)
for sgw's integration specs.

    python3 spec/support/fake_graph.py --port N [--latency-ms M] [--version v21.0] [--config JSON]

It answers the Graph API under /<version>/... the way the facts in the Graph API
notes say Meta does (paths, parameters, response shapes, error bodies and codes,
usage headers), keeps everything in memory, and adds a control and inspection
API under /_fake/... so that specs can create Pages, script failures and check
what was really published. Standalone on purpose: it shares no code with sgw,
so a misunderstanding in sgw cannot be mirrored here and pass unnoticed.

Layout, so that later endpoints (comments, webhooks, OAuth) slot in:
  - Store: the state, one lock.
  - ROUTES: (node kind, edge, method) -> one function per Graph endpoint,
    registered with @route; LITERAL_ROUTES for paths that are not a node id
    (e.g. "me", "oauth/access_token").
  - CONTROL: (method, path) -> one function per /_fake endpoint (@control).
  - FIELDS: per node kind, the fields a GET may ask for.
  - Handler: HTTP plumbing, scripted failures, latency, usage headers.

Control API (JSON bodies; answers JSON; errors {"error":{"message",...}} with 4xx):
  GET    /_fake/health                 {"ok":true,"version":"v21.0"}
  POST   /_fake/reset                  forget everything (config back to the command line's)
  POST   /_fake/pages                  {"id"?,"name"?,"access_token"?,
                                        "instagram_business_account"?: true | {"id"?,"username"?}}
                                       -> {"id","name","access_token","instagram_business_account"?:{"id","username"}}
  GET    /_fake/pages                  {"data":[page, ...]}
  POST   /_fake/tokens/expire          {"access_token","expired"?: true} -> 190/463 from then on
  POST   /_fake/failures               {"match"?:{"method"?,"path"?,"account"?}, "count"?:1,
                                        "kind"?: "error" | "timeout_after_commit" | "close_after_commit"
                                                | "error_after_commit" | "close" | "http" | "delay"
                                                | "late_answer",
                                        "preset"?: name in PRESETS,
                                        "error"?: {"code","subcode"?,"http"?,"message"?,"type"?,
                                                   "is_transient"?,"error_user_title"?,"error_user_msg"?,
                                                   "retry_after_minutes"?},
                                        "status"?, "body"?, "content_type"?   (kind http),
                                        "delay_ms"?                           (delay, timeout_after_commit,
                                                                               late_answer; error and http:
                                                                               answered that much later)}
                                       late_answer: the answer is made at once (a listing shows the
                                       moment it was read) and sent delay_ms later
                                       error_after_commit: the work is done and stored, and the
                                       answer is the error (default code 1, HTTP 500), as Meta
                                       answers at times after a write went through
                                       path: "/{page}/feed", "/{ig}/media_publish", "/{container}",
                                       "/{media}", "/{post}", "/{photo}", "/*/feed", "/**", "/123/feed"
                                       ({x} placeholders match that kind of node only; * and {id} any)
  GET    /_fake/failures, DELETE /_fake/failures
  POST   /_fake/config                 any of DEFAULT_CONFIG's keys -> the whole config
  GET    /_fake/config
  GET    /_fake/published[?account=]   {"data":[{"platform","account_id","kind","id",...}],
                                        "counts":{"<account>":n},"total":n}
  GET    /_fake/requests[?since=&path=&method=], DELETE /_fake/requests
                                       {"data":[{"seq","time","at","method","path","version","params",
                                                 "account","auth","status","outcome",...}]}
  GET    /_fake/assets/<name>          images to publish by URL (see asset()); over https
                                       too with --https-port (fake_graph_tls.py)
  POST   /_fake/instagram/quota        {"account","used"} -> {"account","quota_usage","quota_total",
                                       "quota_duration"}: makes the account's usage in the
                                       current window `used` by counting publishes made
                                       elsewhere (now) or forgetting those; the total and
                                       the window are config ig_quota, ig_quota_duration_s

Python 3 standard library only.
"""

import argparse
import base64
import calendar
import collections
import email.parser
import email.policy
import http.client
import json
import random
import re
import secrets
import signal
import socket
import string
import struct
import sys
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# ---------------------------------------------------------------- limits

MAX_BODY = 2 * 1024 * 1024          # request bodies; we take no file uploads
FB_PHOTO_MAX = 4 * 1024 * 1024      # Page photos by URL: "under 4 MB"
IG_IMAGE_MAX = 8 * 1024 * 1024      # Instagram: at most 8 MiB
IG_ASPECT_MIN, IG_ASPECT_MAX = 0.8, 1.91
IG_CAPTION_MAX, IG_HASHTAGS_MAX, IG_MENTIONS_MAX = 2200, 30, 20
IG_QUOTA_DURATION = 86400
CONTAINER_TTL = 24 * 3600           # containers not published within a day expire
REQUEST_LOG_MAX = 10000
DEFAULT_LIMIT, MAX_LIMIT = 25, 100  # paging

# Parameters never written to the request log.
SECRET_PARAMS = {"access_token", "client_secret", "fb_exchange_token", "appsecret_proof",
                 "input_token", "code"}

DEFAULT_CONFIG = {
    "latency_ms": 0,                  # added to every Graph call
    "container_ready_ms": 300,        # IN_PROGRESS -> FINISHED
    "ig_quota": 50,                   # Instagram posts per window per account ...
    "ig_quota_duration_s": IG_QUOTA_DURATION,  # ... a rolling window of this many seconds
    "fetch_timeout_ms": 10000,        # fetching image URLs
    # Fetch https:// image URLs over plain HTTP: tests serve images from
    # loopback without TLS, while the gateway rightly insists on https URLs
    # for Instagram (Meta reaches a deployment's public HTTPS address).
    "fetch_https_as_http": False,
    "timeout_after_commit_ms": 35000, # default sleep of a timeout_after_commit failure
    "clock_offset_s": 0,              # shifts the fake's clock (quota windows, created_time)
    "usage_window_s": 3600,           # usage headers: calls counted over this window ...
    "app_call_budget": 2000,          # ... against these budgets (100 % = budget reached)
    "account_call_budget": 1000,
    "app_usage_min": 0,               # floors for the reported percentages, to script
    "buc_usage_min": 0,               # "near the limit" without making thousands of calls
}


# ---------------------------------------------------------------- errors

class GraphError(Exception):
    """An error answered in Graph's shape. `retry_after_minutes` only feeds
    the usage headers (Meta has no Retry-After; the estimate lives there)."""

    def __init__(self, code, subcode=None, message=None, http=None, type_=None,
                 transient=None, user_title=None, user_msg=None, retry_after_minutes=None):
        base = CATALOGUE.get((code, subcode)) or CATALOGUE.get((code, None)) or {}
        self.code = code
        self.subcode = subcode
        self.message = message or base.get("message") or "(#%d) An error occurred" % code
        self.http = http or base.get("http") or default_http(code)
        self.type = type_ or base.get("type") or "OAuthException"
        # Meta marks its throttles is_transient as well as its own trouble.
        default_transient = code in (1, 2) or code in RATE_LIMIT_CODES or code == 341
        self.transient = base.get("transient", default_transient) if transient is None else bool(transient)
        self.user_title = user_title if user_title is not None else base.get("user_title")
        self.user_msg = user_msg if user_msg is not None else base.get("user_msg")
        self.retry_after_minutes = retry_after_minutes
        super().__init__(self.message)

    def body(self):
        # Keys Meta leaves out when they have no value are left out here too
        # (error_subcode, error_user_title, error_user_msg): clients must cope.
        e = {"message": self.message, "type": self.type, "code": self.code}
        if self.subcode is not None:
            e["error_subcode"] = self.subcode
        e["is_transient"] = self.transient
        if self.user_title:
            e["error_user_title"] = self.user_title
        if self.user_msg:
            e["error_user_msg"] = self.user_msg
        e["fbtrace_id"] = fbtrace_id()
        return {"error": e}


def default_http(code):
    if code in (4, 10) or 200 <= code <= 299:
        return 403
    if code in (1, 2):
        return 500
    return 400


RATE_LIMIT_CODES = {4, 17, 32, 613} | set(range(80001, 80010))

# Defaults per (code, subcode), then per (code, None). Messages as Meta words
# them where known; "(#code)" prefixes as Meta writes them.
CATALOGUE = {
    (1, None): {"message": "An unknown error occurred", "http": 500, "transient": True},
    (2, None): {"message": "An unexpected error has occurred. Please retry your request later.",
                "http": 500, "transient": True},
    (4, None): {"message": "(#4) Application request limit reached", "http": 403},
    (10, None): {"message": "(#10) Application does not have permission for this action", "http": 403},
    (17, None): {"message": "(#17) User request limit reached"},
    (32, None): {"message": "(#32) Page request limit reached"},
    (100, None): {"message": "(#100) Invalid parameter"},
    (100, 33): {"type": "GraphMethodException"},
    (100, 1366046): {"message": "(#100) Your photos couldn't be uploaded. Photos should be less "
                                "than 4 MB and saved as JPG, PNG, GIF, TIFF, HEIF or WebP files.",
                     "user_title": "Can't Read Files",
                     "user_msg": "Your photos couldn't be uploaded. Photos should be less than "
                                 "4 MB and saved as JPG, PNG, GIF, TIFF, HEIF or WebP files."},
    (104, None): {"message": "An access token is required to request this resource."},
    (190, None): {"message": "Invalid OAuth access token data."},
    (190, 463): {"message": "Error validating access token: Session has expired."},
    (190, 467): {"message": "Invalid OAuth access token - Cannot parse access token"},
    (200, None): {"message": "(#200) If posting to a page, requires both pages_read_engagement "
                              "and pages_manage_posts as an admin with sufficient administrative "
                              "permission", "http": 403},
    (324, None): {"message": "(#324) Missing or invalid image file"},
    (368, None): {"message": "(#368) The action attempted has been deemed abusive or is "
                              "otherwise disallowed"},
    (506, None): {"message": "(#506) Duplicate status message",
                  "user_title": "Duplicate Post",
                  "user_msg": "This status update is identical to the last one you posted. "
                              "Try posting something different, or delete your previous update."},
    (613, None): {"message": "(#613) Calls to this api have exceeded the rate limit."},
    (2500, None): {"message": "Unknown path components"},
    (2635, None): {"message": "(#2635) You are calling a deprecated or unknown version of the "
                               "Graph API."},
    (80001, None): {"message": "(#80001) There have been too many calls to this Page account. "
                                "Wait a bit and try again. For more info, please refer to "
                                "https://developers.facebook.com/docs/graph-api/overview/rate-limiting."},
    (80002, None): {"message": "(#80002) There have been too many calls to this Instagram "
                                "account. Wait a bit and try again. For more info, please refer "
                                "to https://developers.facebook.com/docs/graph-api/overview/rate-limiting."},
    # Instagram content publishing
    (9, 2207042): {"message": "Application request limit reached",
                   "user_title": "Maximum number of posts reached",
                   "user_msg": "You reached maximum number of posts that is allowed to be "
                               "published by Content Publishing API."},
    (9007, 2207027): {"message": "Media ID is not available",
                      "user_title": "Media Not Ready For Publishing",
                      "user_msg": "The media is not ready for publishing, please wait for a moment"},
    (9007, 2207008): {"message": "Media ID is not available",
                      "user_title": "Media already published",
                      "user_msg": "This media container has already been published; it cannot "
                                  "be published again."},
    (24, 2207008): {"message": "The media builder does not exist or has been expired.",
                    "user_title": "Media builder not found"},
    (9004, 2207052): {"message": "Only photo or video can be accepted as media type.",
                      "user_title": "Media download has failed",
                      "user_msg": "The media could not be fetched from this URI."},
    (36000, 2207004): {"message": "The image size is too large.",
                       "user_title": "Image size too large",
                       "user_msg": "The image is too large to download. It should be less than 8 MiB."},
    (36001, 2207005): {"message": "The image format is not supported.",
                       "user_title": "Unsupported format",
                       "user_msg": "The image format is not supported. Supported formats are: JPEG"},
    (36003, 2207009): {"message": "The aspect ratio is not supported.",
                       "user_title": "Aspect ratio not supported",
                       "user_msg": "The submitted image's aspect ratio cannot be published. "
                                   "Please submit an image with an aspect ratio between 4:5 and 1.91:1."},
    (36004, 2207010): {"message": "The caption is too long.",
                       "user_title": "Caption too long",
                       "user_msg": "The caption exceeds 2,200 characters, 30 hashtags or 20 @ tags."},
    (-1, 2207001): {"message": "An unexpected error has occurred. Please retry your request later.",
                    "transient": True, "user_title": "Instagram server error",
                    "user_msg": "Instagram server error. Try again."},
    (-2, 2207003): {"message": "It takes too long to download the media.", "transient": True,
                    "user_title": "Timeout downloading media"},
    (-2, 2207020): {"message": "The media you are trying to access has expired. Please try to "
                               "upload again.", "user_title": "Media expired"},
}

# Named failures for POST /_fake/failures {"preset": ...}; "error" fields
# given with a preset override it. "media" depends on the account (see below).
PRESETS = {
    "rate_limited": {"code": 32, "retry_after_minutes": 1},
    "rate_limited_app": {"code": 4, "retry_after_minutes": 1},
    "rate_limited_user": {"code": 17, "retry_after_minutes": 1},
    "rate_limited_613": {"code": 613, "retry_after_minutes": 1},
    "rate_limited_pages": {"code": 80001, "retry_after_minutes": 1},
    "rate_limited_instagram": {"code": 80002, "retry_after_minutes": 1},
    "transient": {"code": 2},
    "unknown": {"code": 1},
    "ig_server": {"code": -1, "subcode": 2207001},
    "token_expired": {"code": 190, "subcode": 463},
    "token_invalid": {"code": 190, "subcode": 467},
    "permission": {"code": 200},
    "duplicate": {"code": 506},
    "media": {"code": 324},                      # on an Instagram account: 36001/2207005
    "ig_not_ready": {"code": 9007, "subcode": 2207027},
    "ig_quota": {"code": 9, "subcode": 2207042},
    "policy": {"code": 368},
}

FAILURE_KINDS = {"error", "timeout_after_commit", "close_after_commit", "error_after_commit", "close", "http",
                 "delay", "late_answer"}


def fbtrace_id():
    return "A" + "".join(random.choice(string.ascii_letters + string.digits + "-_") for _ in range(22))


def unsupported(method, obj_id):
    verb = {"GET": "get", "POST": "post", "DELETE": "delete"}.get(method, method.lower())
    return GraphError(100, 33, "Unsupported %s request. Object with ID '%s' does not exist, cannot "
                               "be loaded due to missing permissions, or does not support this "
                               "operation. Please read the Graph API documentation at "
                               "https://developers.facebook.com/docs/graph-api" % (verb, obj_id))


def bad_param(message, subcode=None):
    return GraphError(100, subcode, "(#100) " + message)


# ---------------------------------------------------------------- helpers

def fmt_time(t):
    """Graph's timestamps: 2025-03-22T18:20:04+0000."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(t))


def parse_time(value):
    """since/until: unix seconds or an ISO 8601 date(-time); None if unparseable."""
    value = str(value).strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", value):
        return float(value)
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d))?)?(Z|[+-]\d\d:?\d\d)?", value)
    if not m:
        return None
    y, mo, d, hh, mm, ss, tz = m.groups()
    t = calendar.timegm((int(y), int(mo), int(d), int(hh or 0), int(mm or 0), int(ss or 0), 0, 0, 0))
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        t -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return t


def encode_cursor(seq):
    return base64.urlsafe_b64encode(("fake-graph:%d" % seq).encode()).decode().rstrip("=")


def decode_cursor(cursor):
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, seq = raw.split(":")
        if prefix != "fake-graph":
            raise ValueError
        return int(seq)
    except Exception:
        raise bad_param("Invalid cursor") from None


def parse_fields(spec):
    """Graph field syntax: "id,message,from{id,name},comments.limit(5){id}" ->
    [(name, subfields or None)], modifiers like .limit() dropped."""
    out, i, n = [], 0, len(spec)

    def parse_list(i, closing):
        items = []
        while i < n:
            m = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)((?:\.[a-z_]+\([^)]*\))*)\s*").match(spec, i)
            if not m:
                raise bad_param("Syntax error in fields: %r" % spec)
            name, i = m.group(1), m.end()
            sub = None
            if i < n and spec[i] == "{":
                sub, i = parse_list(i + 1, "}")
            items.append((name, sub))
            while i < n and spec[i] == " ":
                i += 1
            if i < n and spec[i] == ",":
                i += 1
                continue
            if closing and i < n and spec[i] == closing:
                return items, i + 1
            if i >= n and not closing:
                return items, i
            raise bad_param("Syntax error in fields: %r" % spec)
        if closing:
            raise bad_param("Syntax error in fields: %r" % spec)
        return items, i

    if spec.strip():
        out, _ = parse_list(0, None)
    return out


def select(value, sub):
    """Applies a nested field selection to a rendered value."""
    if sub is None:
        return value
    if isinstance(value, dict):
        if "data" in value and isinstance(value["data"], list):
            return dict(value, data=[select(v, sub) for v in value["data"]])
        return {k: select(value[k], s) for k, s in sub if k in value}
    if isinstance(value, list):
        return [select(v, sub) for v in value]
    return value


# ---------------------------------------------------------------- images

def make_jpeg(width, height, pad_to=0):
    """A valid grey baseline JPEG of any size, built by hand: every 8x8 block
    is a zero DC difference and an end-of-block, with one-code Huffman tables,
    so the scan is two bits per block. COM segments pad it to pad_to bytes."""
    def seg(marker, payload):
        return b"\xff" + bytes([marker]) + struct.pack(">H", len(payload) + 2) + payload
    head = [b"\xff\xd8",
            seg(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"),
            seg(0xDB, b"\x00" + bytes([1] * 64)),
            seg(0xC0, struct.pack(">BHHB", 8, height, width, 1) + bytes([1, 0x11, 0])),
            seg(0xC4, bytes([0x00, 1] + [0] * 15 + [0])),   # DC: "0" -> category 0
            seg(0xC4, bytes([0x10, 1] + [0] * 15 + [0]))]   # AC: "0" -> end of block
    blocks = ((width + 7) // 8) * ((height + 7) // 8)
    bits = 2 * blocks
    scan = bytearray((bits + 7) // 8)
    if bits % 8:
        scan[-1] = (1 << (8 - bits % 8)) - 1   # pad the last byte with 1 bits
    tail = [seg(0xDA, bytes([1, 1, 0x00, 0, 63, 0])), bytes(scan), b"\xff\xd9"]
    size = sum(map(len, head)) + sum(map(len, tail))
    pads = []
    while size < pad_to:
        chunk = min(65533, max(0, pad_to - size - 4))
        pads.append(seg(0xFE, b" " * chunk))
        size += chunk + 4
    return b"".join(head + pads + tail)


def make_png(width, height, pad_to=0):
    """A valid grey 8-bit PNG; a private ancillary chunk pads it to pad_to bytes."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    parts = [b"\x89PNG\r\n\x1a\n",
             chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)),
             chunk(b"IDAT", zlib.compress(rows))]
    size = sum(map(len, parts)) + 12
    if pad_to > size + 12:
        parts.append(chunk(b"fkPd", b" " * (pad_to - size - 12)))
    parts.append(chunk(b"IEND", b""))
    return b"".join(parts)


def sniff_image(data):
    """(format, width, height); format None when not an image we know."""
    if data[:3] == b"\xff\xd8\xff":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                break
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            length = struct.unpack(">H", data[i + 2:i + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", data[i + 5:i + 9])
                return "jpeg", w, h
            i += 2 + length
        return "jpeg", 0, 0
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return "png", w, h
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif", 0, 0
    return None, 0, 0


# Meta fetches from its own network, never through our proxy settings.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch_url(url, limit, timeout_s, https_as_http=False):
    """Fetches url as Meta would: (bytes, None) or (None, reason). At most
    limit + 1 bytes are read, so the caller can tell "too big"."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        return None, "unsupported URL scheme %r" % scheme
    if scheme == "https" and https_as_http:
        url = "http" + url[len("https"):]
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "facebookexternalhit/1.1 (fake-graph)"})
        with _OPENER.open(req, timeout=timeout_s) as resp:
            return resp.read(limit + 1), None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
        return None, str(e)


# ---------------------------------------------------------------- state

class Store:
    """Everything the fake knows. One re-entrant lock guards it all: calls are
    short, and one lock makes "check, then create" (duplicates, double
    publishing, quotas) atomic without further thought."""

    def __init__(self, config):
        self.lock = threading.RLock()
        self.base_config = dict(config)
        self.reset()

    def reset(self):
        with self.lock:
            self.config = dict(self.base_config)
            self.pages = {}            # page id -> page
            self.ig_users = {}         # ig user id -> ig user
            self.tokens = {}           # token -> {"accounts": set(page ids), "expired": bool}
            self.objects = {}          # any id -> (kind, record)
            self.published = []        # what was really created, in order
            self.failures = []         # scripted failures, first match wins
            self.requests = collections.deque(maxlen=REQUEST_LOG_MAX)
            self.calls = collections.deque()   # (time, account) for usage headers
            self.seq = 0
            self.failure_seq = 0
            self.request_seq = 0

    def now(self):
        return time.time() + float(self.config.get("clock_offset_s") or 0)

    def next_seq(self):
        self.seq += 1
        return self.seq

    def new_id(self, digits, prefix="1"):
        """A numeric id of that many digits, starting with prefix, that no
        object has yet (Instagram's start 17/18, Facebook's mostly 1)."""
        while True:
            rest = digits - len(prefix)
            candidate = prefix + str(random.randint(0, 10 ** rest - 1)).zfill(rest)
            if candidate not in self.objects and candidate not in self.pages:
                return candidate

    def lookup(self, obj_id):
        return self.objects.get(obj_id, (None, None))

    def add_object(self, kind, record):
        self.objects[record["id"]] = (kind, record)

    def record_published(self, entry):
        self.published.append({k: v for k, v in entry.items() if v is not None})


# ---------------------------------------------------------------- requests

class GraphRequest:
    """One Graph call, parsed: method, version, path segments, parameters
    (query string, form, multipart or JSON body), token."""

    def __init__(self, method, path, query, headers, body, host):
        self.method = method
        self.headers = headers
        self.host = host
        self.raw_path = path
        self.params = {}
        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True):
            self.params[k] = v
        self.body_params = self._parse_body(headers.get("Content-Type") or "", body)
        self.params.update(self.body_params)
        segs = [urllib.parse.unquote(s) for s in path.split("/") if s]
        self.version = segs[0] if segs and re.fullmatch(r"v\d+\.\d+", segs[0]) else None
        self.segments = segs[1:] if self.version else segs
        self.path = "/" + "/".join(self.segments)        # without the version
        self.token, self.token_from = None, None
        auth = headers.get("Authorization") or ""
        m = re.match(r"(?i)\s*(bearer|oauth)\s+(\S+)", auth)
        if "access_token" in self.params:
            self.token, self.token_from = self.params["access_token"], "param"
        elif m:
            self.token, self.token_from = m.group(2), "header"
        # Filled in by routing: the node kind and the account the call concerns.
        self.kind, self.obj, self.account = None, None, None

    @staticmethod
    def _parse_body(ctype, body):
        if not body:
            return {}
        ctype_main = ctype.split(";")[0].strip().lower()
        if ctype_main == "application/json":
            try:
                value = json.loads(body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                raise bad_param("Invalid JSON in the request body") from None
            if not isinstance(value, dict):
                raise bad_param("The JSON request body must be an object")
            # Graph treats JSON values as parameter strings.
            return {k: (json.dumps(v) if isinstance(v, (dict, list)) else
                        ("true" if v is True else "false" if v is False else
                         "" if v is None else str(v)))
                    for k, v in value.items()}
        if ctype_main == "multipart/form-data":
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode("latin-1") + b"\r\n\r\n" + body)
            out = {}
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                if name and part.get_filename() is None:
                    out[name] = part.get_payload(decode=True).decode("utf-8", "replace")
            return out
        # Form bodies, also when the client sent no content type.
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise bad_param("The request body is not UTF-8") from None
        return dict(urllib.parse.parse_qsl(text, keep_blank_values=True))

    def safe_params(self):
        return {k: v for k, v in self.params.items() if k not in SECRET_PARAMS}

    def fields(self, kind):
        spec = self.params.get("fields")
        if spec is None:
            return [(f, None) for f in DEFAULT_FIELDS[kind]]
        return parse_fields(spec)

    def int_param(self, name, default, lo, hi):
        value = self.params.get(name)
        if value in (None, ""):
            return default
        try:
            return max(lo, min(hi, int(value)))
        except ValueError:
            raise bad_param("Param %s must be a number" % name) from None


def to_json(value):
    # Compact, non-ASCII escaped as \u00e4: the bytes Meta sends.
    return json.dumps(value, separators=(",", ":"))


class Response:
    def __init__(self, status, body, content_type="application/json; charset=UTF-8", headers=None):
        self.status = status
        self.body = body if isinstance(body, bytes) else to_json(body).encode()
        self.content_type = content_type
        self.headers = headers or {}
        self.error = None

    @classmethod
    def from_error(cls, err):
        resp = cls(err.http, err.body())
        resp.error = err
        return resp


# ---------------------------------------------------------------- the app

class App:
    def __init__(self, config, version, verbose):
        self.store = Store(config)
        self.version = version
        self.verbose = verbose

    @property
    def config(self):
        return self.store.config

    # -- auth ---------------------------------------------------------------

    def authenticate(self, req):
        """The accounts (page and Instagram ids) the request's token may act for."""
        if not req.token:
            raise GraphError(104)
        s = self.store
        with s.lock:
            tok = s.tokens.get(req.token)
            if tok is None:
                raise GraphError(190, 467)
            if tok["expired"]:
                def when(t):
                    return time.strftime("%A, %d-%b-%y %H:%M:%S UTC", time.gmtime(t))
                raise GraphError(190, 463, "Error validating access token: Session has expired on "
                                           "%s. The current time is %s." % (when(tok["expired_at"]),
                                                                            when(s.now())))
            accounts = set(tok["accounts"])
            for page_id in tok["accounts"]:
                page = s.pages.get(page_id)
                if page and page.get("ig_id"):
                    accounts.add(page["ig_id"])
            return accounts

    # -- routing ------------------------------------------------------------

    def resolve(self, req):
        """Finds the node a request is about (for failure matching and usage
        headers), without judging the token."""
        if not req.segments:
            return
        with self.store.lock:
            kind, obj = self.store.lookup(req.segments[0])
        if obj is not None:
            req.kind, req.obj, req.account = kind, obj, obj["account"]

    def dispatch(self, req):
        if req.version != self.version:
            # Meta would serve other live versions (and unversioned calls); the
            # fake refuses them so that a wrong base URL shows at once.
            raise GraphError(2635, message="(#2635) This fake serves Graph API %s only; the call "
                                           "asked for %s." % (self.version, req.version or "no version"))
        if not req.segments:
            raise unsupported(req.method, "")
        literal = LITERAL_ROUTES.get((req.method, "/".join(req.segments)))
        if literal:
            return literal(self, req)
        accounts = self.authenticate(req)
        node_id = req.segments[0]
        if len(req.segments) > 2:
            raise GraphError(2500, message="Unknown path components: /" + "/".join(req.segments[2:]))
        edge = req.segments[1] if len(req.segments) == 2 else None
        if req.obj is None:
            raise unsupported(req.method, node_id)
        if req.account not in accounts:
            # Writes with another Page's token are refused as a permission
            # problem; reads see nothing, as if the object did not exist.
            if req.method != "GET" and req.kind in ("page", "ig_user"):
                raise GraphError(200, message="(#200) The access token does not allow acting on "
                                              "this account")
            raise unsupported(req.method, node_id)
        handler = ROUTES.get((req.kind, edge, req.method))
        if handler is None:
            if edge is not None and req.method == "GET":
                raise bad_param("Tried accessing nonexisting field (%s) on node type (%s)"
                                % (edge, NODE_TYPES[req.kind]))
            if edge is not None:
                raise GraphError(2500, message="Unknown path components: /" + edge)
            raise unsupported(req.method, node_id)
        return handler(self, req, req.obj)

    # -- rendering ----------------------------------------------------------

    def render(self, kind, record, fields):
        out = {}
        getters = FIELDS[kind]
        for name, sub in fields:
            getter = getters.get(name)
            if getter is None:
                raise bad_param("Tried accessing nonexisting field (%s) on node type (%s)"
                                % (name, NODE_TYPES[kind]))
            value = getter(self, record)
            if value is not MISSING:
                out[name] = select(value, sub)
        # Graph adds a node's id whether asked for or not.
        if "id" not in out and "id" in getters:
            out["id"] = getters["id"](self, record)
        return out

    def paginate(self, req, items, kind):
        """items: records with "seq", newest first. Cursors and next/previous
        links as Graph gives them; no "next" on the last page."""
        since, until = req.params.get("since"), req.params.get("until")
        if since not in (None, ""):
            t = parse_time(since)
            if t is None:
                raise bad_param("Param since must be a valid time")
            items = [i for i in items if i["created"] >= t]
        if until not in (None, ""):
            t = parse_time(until)
            if t is None:
                raise bad_param("Param until must be a valid time")
            items = [i for i in items if i["created"] <= t]
        limit = req.int_param("limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        after, before = req.params.get("after"), req.params.get("before")
        if after:
            cut = decode_cursor(after)
            page = [i for i in items if i["seq"] < cut][:limit]
        elif before:
            cut = decode_cursor(before)
            page = [i for i in items if i["seq"] > cut][-limit:]
        else:
            page = items[:limit]
        fields = req.fields(kind)
        out = {"data": [self.render(kind, i, fields) for i in page]}
        if page:
            first, last = page[0]["seq"], page[-1]["seq"]
            paging = {"cursors": {"before": encode_cursor(first), "after": encode_cursor(last)}}
            if any(i["seq"] > first for i in items):
                paging["previous"] = self.page_link(req, "before", encode_cursor(first))
            if any(i["seq"] < last for i in items):
                paging["next"] = self.page_link(req, "after", encode_cursor(last))
            out["paging"] = paging
        return out

    def page_link(self, req, key, cursor):
        # Meta's links carry the access token when it came as a parameter.
        params = {k: v for k, v in req.params.items() if k not in ("after", "before")}
        params[key] = cursor
        return "http://%s/%s%s?%s" % (req.host, self.version, req.path, urllib.parse.urlencode(params))

    # -- usage headers ------------------------------------------------------

    def count_call(self, account):
        s = self.store
        with s.lock:
            now = time.time()
            s.calls.append((now, account))
            window = float(s.config["usage_window_s"])
            while s.calls and s.calls[0][0] < now - window:
                s.calls.popleft()

    def usage_headers(self, req, throttle):
        """X-App-Usage always; X-Business-Use-Case-Usage when the call concerns
        a Page or Instagram account. A scripted rate-limit error (throttle)
        reports 100 % and its wait in minutes, as Meta does when throttling."""
        s = self.store
        with s.lock:
            cfg = s.config
            app_calls = len(s.calls)
            acct_calls = sum(1 for _, a in s.calls if a and a == req.account)
        app_pct = max(int(cfg["app_usage_min"]), app_calls * 100 // max(1, int(cfg["app_call_budget"])))
        buc_pct = max(int(cfg["buc_usage_min"]), acct_calls * 100 // max(1, int(cfg["account_call_budget"])))
        eta = 0
        if throttle is not None:
            if throttle.code == 4:
                app_pct = max(app_pct, 100)
            else:
                buc_pct = max(buc_pct, 100)
            eta = int(throttle.retry_after_minutes or 0)
        app_pct, buc_pct = min(app_pct, 1000), min(buc_pct, 1000)
        headers = {"X-App-Usage": to_json({"call_count": app_pct, "total_time": app_pct // 2,
                                              "total_cputime": app_pct // 3})}
        if req.account:
            kind = "instagram" if req.account in s.ig_users else "pages"
            headers["X-Business-Use-Case-Usage"] = to_json({req.account: [{
                "type": kind, "call_count": buc_pct, "total_cputime": buc_pct // 3,
                "total_time": buc_pct // 2, "estimated_time_to_regain_access": eta}]})
        return headers

    # -- scripted failures --------------------------------------------------

    def take_failure(self, req):
        """The first scripted failure matching req, its count decremented."""
        s = self.store
        with s.lock:
            for f in s.failures:
                if self.failure_matches(f, req):
                    f["remaining"] -= 1
                    if f["remaining"] <= 0:
                        s.failures.remove(f)
                    return dict(f)
        return None

    def failure_matches(self, f, req):
        m = f["match"]
        if m.get("method") and m["method"].upper() != req.method:
            return False
        if m.get("account") and str(m["account"]) != (req.account or ""):
            return False
        pattern = m.get("path")
        if not pattern:
            return True
        segs = [p for p in pattern.split("/") if p]
        if segs and re.fullmatch(r"v\d+\.\d+", segs[0]):
            segs = segs[1:]
        actual = req.segments
        for i, p in enumerate(segs):
            if p == "**":
                return True
            if i >= len(actual):
                return False
            if p == "*" or p in ("{id}", "{any}"):
                continue
            if p.startswith("{") and p.endswith("}"):
                wanted = PLACEHOLDER_KINDS.get(p[1:-1])
                if wanted is None:
                    continue
                with self.store.lock:
                    kind, _ = self.store.lookup(actual[i])
                if kind != wanted:
                    return False
                continue
            if p != actual[i]:
                return False
        return len(segs) == len(actual)

    def failure_error(self, f, req):
        spec = dict(PRESETS.get(f.get("preset") or "", {}))
        if f.get("preset") == "media" and req.account in self.store.ig_users:
            spec = {"code": 36001, "subcode": 2207005}
        spec.update(f.get("error") or {})
        code = int(spec.get("code", 1))
        return GraphError(code, spec.get("subcode", spec.get("error_subcode")),
                          message=spec.get("message"), http=spec.get("http"),
                          type_=spec.get("type"), transient=spec.get("is_transient"),
                          user_title=spec.get("error_user_title"), user_msg=spec.get("error_user_msg"),
                          retry_after_minutes=spec.get("retry_after_minutes",
                                                       1 if code in RATE_LIMIT_CODES else None))


NODE_TYPES = {"page": "Page", "ig_user": "IGUser", "post": "PagePost", "photo": "Photo",
              "container": "ShadowIGMediaBuilder", "ig_media": "IGMedia"}
PLACEHOLDER_KINDS = {"page": "page", "ig": "ig_user", "ig_user": "ig_user", "post": "post",
                     "photo": "photo", "container": "container", "media": "ig_media"}

MISSING = object()   # a field the node has no value for: left out of the answer

# ---------------------------------------------------------------- Graph endpoints

ROUTES = {}
LITERAL_ROUTES = {}


def route(kind, edge, method):
    def register(fn):
        ROUTES[(kind, edge, method)] = fn
        return fn
    return register


def literal_route(method, path):
    """For paths that are not "<node id>[/<edge>]" (me/accounts, oauth/...):
    the handler authenticates itself."""
    def register(fn):
        LITERAL_ROUTES[(method, path)] = fn
        return fn
    return register


@route("page", None, "GET")
@route("ig_user", None, "GET")
@route("post", None, "GET")
@route("photo", None, "GET")
@route("ig_media", None, "GET")
def get_node(app, req, obj):
    with app.store.lock:
        return Response(200, app.render(req.kind, obj, req.fields(req.kind)))


@route("page", "feed", "GET")
@route("page", "published_posts", "GET")
@route("page", "posts", "GET")
def list_page_posts(app, req, page):
    with app.store.lock:
        items = sorted(page["posts"], key=lambda p: -p["seq"])
        return Response(200, app.paginate(req, items, "post"))


@route("page", "feed", "POST")
def create_feed_post(app, req, page):
    message = req.params.get("message", "")
    link = req.params.get("link") or None
    if not message and not link:
        raise bad_param("Missing message or attachment")
    s = app.store
    with s.lock:
        # Meta refuses a status identical to the Page's previous one.
        last = max(page["posts"], key=lambda p: p["seq"], default=None)
        if message and last and last["kind"] == "status" and last["message"] == message:
            raise GraphError(506)
        post = new_page_post(app, page, "status", message, link=link)
    return Response(200, {"id": post["id"]})


@route("page", "photos", "POST")
def create_photo(app, req, page):
    url = req.params.get("url")
    if not url:
        raise GraphError(324, message="(#324) Requires upload file")
    # Meta fetches the image itself, synchronously for Page photos. Never
    # under the lock: the URL may well point back at this server.
    data, why = fetch_url(url, FB_PHOTO_MAX, app.config["fetch_timeout_ms"] / 1000.0,
                          app.config.get("fetch_https_as_http", False))
    if data is None:
        raise GraphError(324, user_title="Missing or invalid image file",
                         user_msg="The image could not be fetched from %s: %s" % (url, why))
    fmt, _, _ = sniff_image(data)
    if len(data) > FB_PHOTO_MAX or fmt not in ("jpeg", "png"):
        raise GraphError(100, 1366046)
    caption = req.params.get("caption", req.params.get("message", ""))
    s = app.store
    with s.lock:
        photo_id = s.new_id(16)
        post = new_page_post(app, page, "photo", caption, url=url, photo_id=photo_id)
        s.add_object("photo", {"id": photo_id, "account": page["id"], "page_id": page["id"],
                               "post_id": post["id"], "caption": caption, "url": url,
                               "created": post["created"], "seq": post["seq"]})
    return Response(200, {"id": photo_id, "post_id": post["id"]})


def new_page_post(app, page, kind, message, link=None, url=None, photo_id=None):
    s = app.store
    post_id = s.new_id(18, "122")
    full = "%s_%s" % (page["id"], post_id)
    post = {"id": full, "account": page["id"], "page_id": page["id"], "post_id": post_id,
            "kind": kind, "message": message, "link": link, "url": url, "photo_id": photo_id,
            "created": s.now(), "seq": s.next_seq()}
    page["posts"].append(post)
    s.add_object("post", post)
    s.record_published({"platform": "facebook", "account_id": page["id"], "kind": kind,
                        "id": full, "photo_id": photo_id, "message": message, "link": link,
                        "url": url, "created_time": fmt_time(post["created"]),
                        "permalink_url": post_permalink(post)})
    return post


def post_permalink(post):
    return "https://www.facebook.com/%s/posts/%s" % (post["page_id"], post["post_id"])


# -- Instagram --------------------------------------------------------------

@route("ig_user", "media", "POST")
def create_container(app, req, ig):
    media_type = (req.params.get("media_type") or "IMAGE").upper()
    if media_type != "IMAGE" or req.params.get("is_carousel_item") == "true":
        raise bad_param("The fake Graph API supports single image posts only (media_type=%s)" % media_type)
    image_url = req.params.get("image_url")
    if not image_url:
        raise bad_param("The parameter image_url is required.")
    caption = req.params.get("caption", "")
    if (len(caption) > IG_CAPTION_MAX or len(re.findall(r"#\w+", caption)) > IG_HASHTAGS_MAX
            or len(re.findall(r"(?<![\w.])@[\w.]+", caption)) > IG_MENTIONS_MAX):
        raise GraphError(36004, 2207010)
    s = app.store
    with s.lock:
        container = {"id": s.new_id(17, "178"), "account": ig["id"], "ig_id": ig["id"],
                     "image_url": image_url, "caption": caption, "created": s.now(),
                     "ready_at": time.monotonic() + s.config["container_ready_ms"] / 1000.0,
                     "fetched": False, "error": None, "media_id": None}
        s.add_object("container", container)
    # Meta builds the container in the background; so does the fake.
    threading.Thread(target=build_container, args=(app, container), daemon=True).start()
    return Response(200, {"id": container["id"]})


def build_container(app, container):
    data, why = fetch_url(container["image_url"], IG_IMAGE_MAX, app.config["fetch_timeout_ms"] / 1000.0,
                          app.config.get("fetch_https_as_http", False))
    error = None
    if data is None:
        error = GraphError(9004, 2207052, user_msg="The media could not be fetched from this URI: %s (%s)"
                           % (container["image_url"], why))
    else:
        fmt, w, h = sniff_image(data)
        if fmt != "jpeg":
            error = GraphError(36001, 2207005)
        elif len(data) > IG_IMAGE_MAX:
            error = GraphError(36000, 2207004)
        elif w and h and not (IG_ASPECT_MIN <= w / h <= IG_ASPECT_MAX):
            error = GraphError(36003, 2207009)
    with app.store.lock:
        container["error"] = error
        container["fetched"] = True


def container_status(app, c):
    if c["media_id"]:
        return "PUBLISHED"
    if app.store.now() - c["created"] > CONTAINER_TTL:
        return "EXPIRED"
    if not c["fetched"] or time.monotonic() < c["ready_at"]:
        return "IN_PROGRESS"
    return "ERROR" if c["error"] else "FINISHED"


def container_status_text(app, c):
    status = container_status(app, c)
    if status == "ERROR":
        return "Error: Media upload has failed with error code %s" % c["error"].subcode
    return {"IN_PROGRESS": "In Progress: Media is still being processed.",
            "FINISHED": "Finished: Media has been uploaded and it is ready to be published.",
            "PUBLISHED": "Published: Media has been successfully published.",
            "EXPIRED": "Expired: Media was not published within 24 hours."}[status]


@route("container", None, "GET")
def get_container(app, req, c):
    with app.store.lock:
        return Response(200, app.render("container", c, req.fields("container")))


@route("ig_user", "media_publish", "POST")
def publish_container(app, req, ig):
    creation_id = req.params.get("creation_id")
    if not creation_id:
        raise bad_param("The parameter creation_id is required.")
    s = app.store
    with s.lock:
        kind, c = s.lookup(creation_id)
        if kind != "container" or c["ig_id"] != ig["id"]:
            raise GraphError(24, 2207008, message="The media builder with creation id = %s does not "
                                                  "exist or has been expired." % creation_id)
        status = container_status(app, c)
        if status == "PUBLISHED":
            # Never a second media for one container.
            raise GraphError(9007, 2207008)
        if status == "EXPIRED":
            raise GraphError(-2, 2207020)
        if status == "IN_PROGRESS":
            raise GraphError(9007, 2207027)
        if status == "ERROR":
            e = c["error"]
            raise GraphError(e.code, e.subcode, message=e.message, user_msg=e.user_msg)
        now = s.now()
        if ig_quota_usage(s, ig, now) >= int(s.config["ig_quota"]):
            raise GraphError(9, 2207042)
        media = {"id": s.new_id(17, "179"), "account": ig["id"], "ig_id": ig["id"],
                 "container_id": c["id"], "caption": c["caption"], "image_url": c["image_url"],
                 "shortcode": "".join(random.choice(string.ascii_letters + string.digits + "_-")
                                      for _ in range(11)),
                 "created": now, "seq": s.next_seq()}
        c["media_id"] = media["id"]
        ig["media"].append(media)
        s.add_object("ig_media", media)
        s.record_published({"platform": "instagram", "account_id": ig["id"], "kind": "image",
                            "id": media["id"], "container_id": c["id"], "caption": c["caption"],
                            "url": c["image_url"], "created_time": fmt_time(now),
                            "permalink": ig_permalink(media)})
    return Response(200, {"id": media["id"]})


def ig_quota_usage(s, ig, now):
    """Publishes in the rolling window: Meta counts every API publish of the
    account, ours and those of other tools, until it is quota_duration old."""
    since = now - float(s.config["ig_quota_duration_s"])
    return (sum(1 for m in ig["media"] if m["created"] > since)
            + sum(1 for t in ig["foreign_publishes"] if t > since))


def ig_permalink(media):
    return "https://www.instagram.com/p/%s/" % media["shortcode"]


@route("ig_user", "media", "GET")
def list_ig_media(app, req, ig):
    with app.store.lock:
        items = sorted(ig["media"], key=lambda m: -m["seq"])
        return Response(200, app.paginate(req, items, "ig_media"))


@route("ig_user", "content_publishing_limit", "GET")
def publishing_limit(app, req, ig):
    s = app.store
    with s.lock:
        full = {"quota_usage": ig_quota_usage(s, ig, s.now()),
                "config": {"quota_total": int(s.config["ig_quota"]),
                           "quota_duration": int(s.config["ig_quota_duration_s"])}}
    wanted = req.params.get("fields")
    if wanted:
        names = {n for n, _ in parse_fields(wanted)}
        unknown = names - set(full)
        if unknown:
            raise bad_param("Tried accessing nonexisting field (%s) on node type "
                            "(ContentPublishingLimitResponse)" % sorted(unknown)[0])
        full = {k: v for k, v in full.items() if k in names}
    return Response(200, {"data": [full]})


# -- fields per node kind ---------------------------------------------------

def _opt(v):
    return MISSING if v in (None, "") else v


FIELDS = {
    "page": {
        "id": lambda app, p: p["id"],
        "name": lambda app, p: p["name"],
        "access_token": lambda app, p: p["access_token"],
        "instagram_business_account": lambda app, p: {"id": p["ig_id"]} if p.get("ig_id") else MISSING,
        "link": lambda app, p: "https://www.facebook.com/%s" % p["id"],
    },
    "ig_user": {
        "id": lambda app, u: u["id"],
        "username": lambda app, u: u["username"],
        "name": lambda app, u: u["username"],
        "media_count": lambda app, u: len(u["media"]),
        "followers_count": lambda app, u: 0,
    },
    "post": {
        "id": lambda app, p: p["id"],
        "message": lambda app, p: _opt(p["message"]),
        "created_time": lambda app, p: fmt_time(p["created"]),
        "updated_time": lambda app, p: fmt_time(p["created"]),
        "permalink_url": lambda app, p: post_permalink(p),
        "link": lambda app, p: _opt(p["link"]),
        "full_picture": lambda app, p: _opt(p["url"]),
        "status_type": lambda app, p: "added_photos" if p["kind"] == "photo" else "mobile_status_update",
        "is_published": lambda app, p: True,
        "from": lambda app, p: {"id": p["page_id"], "name": app.store.pages[p["page_id"]]["name"]},
    },
    "photo": {
        "id": lambda app, p: p["id"],
        "name": lambda app, p: _opt(p["caption"]),
        "created_time": lambda app, p: fmt_time(p["created"]),
        "link": lambda app, p: "https://www.facebook.com/photo.php?fbid=%s" % p["id"],
        "page_story_id": lambda app, p: p["post_id"],
        "from": lambda app, p: {"id": p["page_id"], "name": app.store.pages[p["page_id"]]["name"]},
    },
    "container": {
        "id": lambda app, c: c["id"],
        "status_code": lambda app, c: container_status(app, c),
        "status": lambda app, c: container_status_text(app, c),
    },
    "ig_media": {
        "id": lambda app, m: m["id"],
        "caption": lambda app, m: _opt(m["caption"]),
        "timestamp": lambda app, m: fmt_time(m["created"]),
        "permalink": lambda app, m: ig_permalink(m),
        "shortcode": lambda app, m: m["shortcode"],
        "media_type": lambda app, m: "IMAGE",
        "media_product_type": lambda app, m: "FEED",
        "media_url": lambda app, m: m["image_url"],
        "username": lambda app, m: app.store.ig_users[m["ig_id"]]["username"],
        "owner": lambda app, m: {"id": m["ig_id"]},
        "like_count": lambda app, m: 0,
        "comments_count": lambda app, m: 0,
    },
}

# What a GET without `fields` returns, as Meta does for these node types.
DEFAULT_FIELDS = {
    "page": ["name", "id"],
    "ig_user": ["id"],
    "post": ["created_time", "message", "id"],
    "photo": ["created_time", "name", "id"],
    "container": ["id"],
    "ig_media": ["id"],
}


# ---------------------------------------------------------------- control API

CONTROL = {}


def control(method, path):
    def register(fn):
        CONTROL[(method, path)] = fn
        return fn
    return register


class ControlError(Exception):
    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def control_error_body(message):
    return {"error": {"message": message, "type": "FakeControlError", "code": 100,
                      "is_transient": False, "fbtrace_id": fbtrace_id()}}


@control("GET", "health")
def c_health(app, params, body):
    return {"ok": True, "version": app.version}


@control("POST", "reset")
def c_reset(app, params, body):
    app.store.reset()
    return {"ok": True}


def numeric_id(value):
    if value is None:
        return None
    value = str(value)
    if not re.fullmatch(r"\d{1,20}", value):
        raise ControlError("ids are numeric strings: %r" % value)
    return value


@control("POST", "pages")
def c_add_page(app, params, body):
    s = app.store
    with s.lock:
        page_id = numeric_id(body.get("id")) or s.new_id(15)
        if page_id in s.objects:
            raise ControlError("id %s is taken" % page_id, 409)
        token = body.get("access_token") or "EAAfake" + secrets.token_urlsafe(24)
        page = {"id": page_id, "account": page_id, "name": body.get("name") or "Page %s" % page_id,
                "access_token": token, "ig_id": None, "posts": []}
        iga = body.get("instagram_business_account")
        ig = None
        if iga:
            iga = iga if isinstance(iga, dict) else {}
            ig_id = numeric_id(iga.get("id")) or s.new_id(17, "1784")
            if ig_id in s.objects:
                raise ControlError("id %s is taken" % ig_id, 409)
            ig = {"id": ig_id, "account": ig_id, "page_id": page_id,
                  "username": iga.get("username") or "ig_%s" % ig_id[-6:], "media": [],
                  "foreign_publishes": []}
            page["ig_id"] = ig_id
            s.ig_users[ig_id] = ig
            s.add_object("ig_user", ig)
        s.pages[page_id] = page
        s.add_object("page", page)
        tok = s.tokens.setdefault(token, {"accounts": set(), "expired": False, "expired_at": None})
        tok["accounts"].add(page_id)
        return page_view(page, ig)


def page_view(page, ig):
    out = {"id": page["id"], "name": page["name"], "access_token": page["access_token"]}
    if ig:
        out["instagram_business_account"] = {"id": ig["id"], "username": ig["username"]}
    return out


@control("GET", "pages")
def c_list_pages(app, params, body):
    s = app.store
    with s.lock:
        return {"data": [page_view(p, s.ig_users.get(p["ig_id"])) for p in s.pages.values()]}


@control("POST", "tokens/expire")
def c_expire_token(app, params, body):
    s = app.store
    token = body.get("access_token")
    with s.lock:
        tok = s.tokens.get(token)
        if tok is None:
            raise ControlError("unknown access_token", 404)
        tok["expired"] = body.get("expired", True) is not False
        tok["expired_at"] = s.now() if tok["expired"] else None
    return {"ok": True, "expired": tok["expired"]}


@control("POST", "failures")
def c_add_failure(app, params, body):
    match = body.get("match") or {}
    if not isinstance(match, dict):
        raise ControlError("match must be an object")
    unknown = set(match) - {"method", "path", "account"}
    if unknown:
        raise ControlError("unknown match keys: %s" % ", ".join(sorted(unknown)))
    kind = body.get("kind") or "error"
    if kind not in FAILURE_KINDS:
        raise ControlError("kind must be one of %s" % ", ".join(sorted(FAILURE_KINDS)))
    preset = body.get("preset")
    if preset is not None and preset not in PRESETS:
        raise ControlError("unknown preset %r (known: %s)" % (preset, ", ".join(sorted(PRESETS))))
    if kind == "error" and not preset and not (body.get("error") or {}).get("code"):
        raise ControlError("an error failure needs a preset or error.code")
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ControlError("count must be a positive integer")
    delay = body.get("delay_ms")
    if delay is not None and (not isinstance(delay, (int, float)) or isinstance(delay, bool) or delay < 0):
        raise ControlError("delay_ms must be a non-negative number")
    if kind in ("delay", "late_answer") and delay is None:
        raise ControlError("a %s failure needs delay_ms" % kind)
    s = app.store
    with s.lock:
        s.failure_seq += 1
        f = {"id": "f%d" % s.failure_seq, "match": match, "count": count, "remaining": count,
             "kind": kind}
        if kind == "error":
            f.update(preset=preset, error=body.get("error") or {})
        elif kind == "http":
            f.update(status=int(body.get("status", 500)), body=str(body.get("body", "")),
                     content_type=body.get("content_type", "text/html; charset=utf-8"))
        if body.get("delay_ms") is not None:
            f["delay_ms"] = body["delay_ms"]
        s.failures.append(f)
        return dict(f)


@control("GET", "failures")
def c_list_failures(app, params, body):
    with app.store.lock:
        return {"data": [dict(f) for f in app.store.failures]}


@control("DELETE", "failures")
def c_clear_failures(app, params, body):
    with app.store.lock:
        app.store.failures.clear()
    return {"ok": True}


@control("GET", "config")
def c_get_config(app, params, body):
    with app.store.lock:
        return dict(app.store.config)


@control("POST", "config")
def c_set_config(app, params, body):
    unknown = set(body) - set(DEFAULT_CONFIG)
    if unknown:
        raise ControlError("unknown config keys: %s" % ", ".join(sorted(unknown)))
    for k, v in body.items():
        if isinstance(DEFAULT_CONFIG[k], bool):
            if not isinstance(v, bool):
                raise ControlError("config %s must be true or false" % k)
        elif not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 and k != "clock_offset_s":
            raise ControlError("config %s must be a non-negative number" % k)
    with app.store.lock:
        app.store.config.update(body)
        return dict(app.store.config)


@control("POST", "instagram/quota")
def c_instagram_quota(app, params, body):
    s = app.store
    used = body.get("used")
    if not isinstance(used, int) or isinstance(used, bool) or used < 0:
        raise ControlError("used must be a non-negative integer")
    with s.lock:
        ig = s.ig_users.get(str(body.get("account")))
        if ig is None:
            raise ControlError("unknown Instagram account", 404)
        now = s.now()
        since = now - float(s.config["ig_quota_duration_s"])
        ig["foreign_publishes"] = [t for t in ig["foreign_publishes"] if t > since]
        while ig_quota_usage(s, ig, now) > used and ig["foreign_publishes"]:
            ig["foreign_publishes"].pop(0)
        while ig_quota_usage(s, ig, now) < used:
            ig["foreign_publishes"].append(now)
        return {"account": ig["id"], "quota_usage": ig_quota_usage(s, ig, now),
                "quota_total": int(s.config["ig_quota"]),
                "quota_duration": int(s.config["ig_quota_duration_s"])}


@control("GET", "published")
def c_published(app, params, body):
    s = app.store
    with s.lock:
        items = [dict(p) for p in s.published
                 if not params.get("account") or p["account_id"] == params["account"]]
    counts = collections.Counter(p["account_id"] for p in items)
    return {"data": items, "counts": dict(counts), "total": len(items)}


@control("GET", "requests")
def c_requests(app, params, body):
    since = int(params.get("since") or 0)
    with app.store.lock:
        items = [dict(r) for r in app.store.requests if r["seq"] > since]
    if params.get("path"):
        items = [r for r in items if r["path"] == params["path"]]
    if params.get("method"):
        items = [r for r in items if r["method"] == params["method"].upper()]
    return {"data": items}


@control("DELETE", "requests")
def c_clear_requests(app, params, body):
    with app.store.lock:
        app.store.requests.clear()
    return {"ok": True}


def asset(name, params):
    """Images for specs to publish by URL: tiny.jpg, tiny.png, wide.jpg (3:1,
    refused by Instagram), large.jpg (5 MiB: too big for a Page photo),
    huge.jpg (9 MiB: too big for Instagram), image.jpg / image.png with w, h
    and bytes (padded size), multi-picture.jpg (an MPO, 640x640), not-an-image.txt."""
    def num(key, default, hi):
        try:
            return max(1, min(hi, int(params.get(key, default))))
        except ValueError:
            raise ControlError("%s must be a number" % key)
    fixed = {"tiny.jpg": ("jpg", 16, 16, 0), "tiny.png": ("png", 16, 16, 0),
             "wide.jpg": ("jpg", 48, 16, 0), "large.jpg": ("jpg", 16, 16, 5 * 1024 * 1024),
             "huge.jpg": ("jpg", 16, 16, 9 * 1024 * 1024)}
    if name in fixed:
        ext, w, h, pad = fixed[name]
    elif name in ("image.jpg", "image.png"):
        ext = name[-3:]
        w, h = num("w", 16, 4096), num("h", 16, 4096)
        pad = num("bytes", 1, 20 * 1024 * 1024)
    elif name == "not-an-image.txt":
        return "text/plain; charset=utf-8", b"this is not an image\n"
    elif name == "multi-picture.jpg":
        # A multi-picture JPEG (MPO), as 3D cameras write: an APP2 "MPF"
        # segment whose MP Entry lists the primary image and a disparity
        # view (CIPA DC-007), and the second picture after the first.
        first = make_jpeg(640, 640)
        ifd = (struct.pack(">H", 3) + struct.pack(">HHI4s", 0xB000, 7, 4, b"0100")
               + struct.pack(">HHII", 0xB001, 4, 1, 2) + struct.pack(">HHII", 0xB002, 7, 32, 50)
               + struct.pack(">I", 0))
        entries = struct.pack(">IIIHH", 0x030000, len(first), 0, 0, 0) + struct.pack(">IIIHH", 0x020002, len(first), 0, 0, 0)
        mpf = b"MPF\x00" + b"MM" + struct.pack(">HI", 42, 8) + ifd + entries
        return "image/jpeg", first[:2] + b"\xff\xe2" + struct.pack(">H", len(mpf) + 2) + mpf + first[2:] + first
    else:
        return None
    if ext == "jpg":
        return "image/jpeg", make_jpeg(w, h, pad)
    return "image/png", make_png(w, h, pad)


# ---------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, as Graph clients expect
    server_version = "fake-graph"
    sys_version = ""

    def do_GET(self):
        self.handle_any()

    do_POST = do_DELETE = do_PUT = do_GET

    def log_message(self, fmt, *args):
        if self.server.app.verbose:
            sys.stderr.write("fake-graph: %s - %s\n" % (self.address_string(), fmt % args))

    def handle_any(self):
        try:
            self.dispatch_request()
        except (ConnectionError, socket.timeout, BrokenPipeError):
            self.close_connection = True
        except Exception:
            # Last resort: whatever broke, the client gets Graph's shape.
            if self.server.app.verbose:
                traceback.print_exc()
            try:
                self.send(Response(500, GraphError(1).body()))
            except Exception:
                self.close_connection = True

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks, total = [], 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                total += size
                if total > MAX_BODY:
                    return None
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            # Read and drop a body moderately over the limit, so the client,
            # still sending, gets our answer rather than a reset.
            if length <= 8 * MAX_BODY:
                while length > 0:
                    length -= len(self.rfile.read(min(length, 65536)) or b"x" * length)
            return None
        return self.rfile.read(length) if length > 0 else b""

    def send(self, resp, extra_headers=None):
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        for k, v in list(resp.headers.items()) + list((extra_headers or {}).items()):
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(resp.body)
        self.wfile.flush()

    def drop(self):
        """Ends the connection without a byte of answer."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def dispatch_request(self):
        app = self.server.app
        split = urllib.parse.urlsplit(self.path)
        body = self.read_body()
        if body is None:
            self.close_connection = True
            self.send(Response(413, GraphError(1, message="Request body too large").body()))
            return
        if split.path == "/_fake" or split.path.startswith("/_fake/"):
            self.handle_control(app, split, body)
        else:
            self.handle_graph(app, split, body)

    # -- control ------------------------------------------------------------

    def handle_control(self, app, split, body):
        name = split.path[len("/_fake/"):].strip("/")
        params = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
        try:
            if name.startswith("assets/") and self.command in ("GET", "HEAD"):
                if getattr(self.server, "is_tls", False):
                    fake_graph_tls.record_request(self.path)
                if "delay_ms" in params:
                    time.sleep(min(60000, max(0, int(params["delay_ms"] or 0))) / 1000.0)
                if name == "assets/redirect":
                    self.send(Response(302, b"", "text/plain; charset=utf-8", {"Location": params.get("to", self.path)}))
                    return
                found = asset(name[len("assets/"):], params)
                if found is None:
                    self.send(Response(404, b"not found\n", "text/plain; charset=utf-8"))
                else:
                    self.send(Response(200, found[1], found[0]))
                return
            fn = CONTROL.get((self.command, name))
            if fn is None:
                raise ControlError("no control endpoint %s /_fake/%s" % (self.command, name), 404)
            try:
                data = json.loads(body.decode("utf-8")) if body.strip() else {}
            except ValueError:
                raise ControlError("the body must be JSON")
            if not isinstance(data, dict):
                raise ControlError("the body must be a JSON object")
            self.send(Response(200, fn(app, params, data)))
        except ControlError as e:
            self.send(Response(e.status, control_error_body(str(e))))

    # -- Graph --------------------------------------------------------------

    def handle_graph(self, app, split, body):
        started = time.monotonic()
        host = self.headers.get("Host") or "127.0.0.1:%d" % self.server.server_address[1]
        entry = {"method": self.command, "path": split.path, "params": {}, "status": None,
                 "outcome": None}
        try:
            req = GraphRequest(self.command, split.path, split.query, self.headers, body, host)
        except GraphError as e:
            self.log_request_entry(app, entry)
            entry.update(status=e.http, outcome="error", error_code=e.code)
            self.send(Response.from_error(e))
            return
        app.resolve(req)
        entry.update(path=req.path, version=req.version, params=req.safe_params(),
                     account=req.account, auth=req.token_from)
        self.log_request_entry(app, entry)
        app.count_call(req.account)

        failure = app.take_failure(req)
        kind = failure["kind"] if failure else None
        if failure:
            entry["failure"] = failure["id"]
        if kind == "close":
            entry.update(outcome="closed")
            self.drop()
            return

        latency = float(app.config["latency_ms"] or 0)
        if kind in ("delay", "error", "http"):
            latency += float(failure.get("delay_ms") or 0)
        if latency > 0:
            time.sleep(latency / 1000.0)

        throttle = None
        if kind == "error":
            err = app.failure_error(failure, req)
            if err.code in RATE_LIMIT_CODES:
                throttle = err
            resp, entry["outcome"], entry["error_code"] = Response.from_error(err), "error", err.code
        elif kind == "http":
            resp = Response(int(failure["status"]), str(failure["body"]).encode(),
                            failure["content_type"])
            entry["outcome"] = "http"
        else:
            try:
                resp = app.dispatch(req)
                entry["outcome"] = "ok"
                if kind == "error_after_commit":
                    err = app.failure_error(failure, req)
                    resp, entry["outcome"], entry["error_code"] = Response.from_error(err), kind, err.code
            except GraphError as e:
                resp, entry["outcome"], entry["error_code"] = Response.from_error(e), "error", e.code
            except Exception:
                if app.verbose:
                    traceback.print_exc()
                e = GraphError(1)
                resp, entry["outcome"], entry["error_code"] = Response.from_error(e), "error", 1

        headers = {}
        if kind != "http":
            headers = app.usage_headers(req, throttle)
            headers["facebook-api-version"] = app.version
            headers["x-fb-trace-id"] = fbtrace_id()[:11]
            if resp.error is not None and resp.error.code == 190:
                headers["WWW-Authenticate"] = 'OAuth "Facebook Platform" "invalid_token" "%s"' % (
                    resp.error.message.replace('"', "'"))
        entry["status"] = resp.status
        entry["duration_ms"] = int((time.monotonic() - started) * 1000)

        if kind == "close_after_commit":
            # The work is done and stored; the connection ends without a byte
            # of answer, as when a front end dies after forwarding.
            entry["outcome"] = "close_after_commit"
            self.drop()
            return
        if kind == "timeout_after_commit":
            # The work is done and stored; the answer comes too late for the
            # client, which sees a time-out although the post exists.
            entry["outcome"] = "timeout_after_commit"
            delay = failure.get("delay_ms")
            time.sleep(float(delay if delay is not None else app.config["timeout_after_commit_ms"]) / 1000.0)
        elif kind == "late_answer":
            time.sleep(float(failure["delay_ms"]) / 1000.0)
        self.send(resp, headers)

    def log_request_entry(self, app, entry):
        s = app.store
        with s.lock:
            s.request_seq += 1
            entry["seq"] = s.request_seq
            entry["time"] = fmt_time(s.now())
            entry["at"] = s.now()            # seconds, to the microsecond: how calls are spaced
            s.requests.append(entry)


class Server(ThreadingHTTPServer):
    daemon_threads = True        # a sleeping timeout_after_commit must not hold up exit
    allow_reuse_address = True
    request_queue_size = 128


import fake_graph_comments; fake_graph_comments.install(sys.modules[__name__])  # noqa: E402,E702 comments, Meta webhooks
import fake_graph_oauth; fake_graph_oauth.install(sys.modules[__name__])  # noqa: E402,E702 Facebook Login: dialog, tokens, /me
import fake_graph_subscriptions; fake_graph_subscriptions.install(sys.modules[__name__])  # noqa: E402,E702 webhook subscriptions, appsecret_proof
import fake_graph_tls; fake_graph_tls.install(sys.modules[__name__])  # noqa: E402,E702 https port for assets
import fake_graph_tokens; fake_graph_tokens.install(sys.modules[__name__])  # noqa: E402,E702 debug_token, permissions, signed_request (last)


def main(argv=None):
    ap = argparse.ArgumentParser(description="A fake of Meta's Graph API for sgw's specs.")
    ap.add_argument("--port", type=int, required=True, help="0 picks a free port")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--version", default="v21.0", help="the Graph API version served")
    ap.add_argument("--latency-ms", type=int, default=0)
    ap.add_argument("--container-ready-ms", type=int, default=DEFAULT_CONFIG["container_ready_ms"])
    ap.add_argument("--ig-quota", type=int, default=DEFAULT_CONFIG["ig_quota"])
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    ap.add_argument("--config", help="a JSON object of settings, as POST /_fake/config takes; kept across resets")
    ap.add_argument("--https-port", type=int, help="also serve over TLS on this port (0: a free one)")
    ap.add_argument("--tls-dir", help="where the https port's certificate is made (with --https-port)")
    args = ap.parse_args(argv)

    config = dict(DEFAULT_CONFIG, latency_ms=args.latency_ms,
                  container_ready_ms=args.container_ready_ms, ig_quota=args.ig_quota)
    server = Server((args.host, args.port), Handler)
    server.app = App(config, args.version, args.verbose)
    if args.config:
        try:
            CONTROL[("POST", "config")](server.app, {}, json.loads(args.config))
        except (ValueError, AttributeError, ControlError) as e:
            ap.error("--config: %s" % e)
        server.app.store.base_config = dict(server.app.store.config)

    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)

    if args.https_port is not None:
        fake_graph_tls.serve(server.app, args.host, args.https_port, args.tls_dir or ".")
    print("fake-graph listening on %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

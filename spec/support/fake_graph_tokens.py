"""Token introspection and permissions for the fake Graph API (fake_graph.py):
Meta's GET /debug_token, permissions a Page token can lose, and the
signed_request Meta posts to an app's deauthorize and data-deletion callbacks
(the Meta production notes, "Tokens" and "Required callbacks").

fake_graph.py imports this module and calls install(itself) once, after the
other extensions, so that the permission check covers every Graph endpoint
they registered.

Page tokens (POST /_fake/pages) belong to the fake person of fake_graph_oauth
("Fake User", user_id 100000000000777); they are issued when made, never expire
(expires_at 0, as a Page token from a long-lived user token) and keep data
access for 90 days, with every permission sgw asks for.

Graph endpoints (under /<version>/):
  GET /debug_token?input_token=T     access_token must be the app token
                                     "{oauth_app_id}|{oauth_app_secret}": without one 104;
                                     "id|secret" that is not the app's: 190 "Invalid OAuth
                                     access token signature."; a Page or user token:
                                     (#100) "You must provide an app access token, or a user
                                     access token that is an owner or developer of the app";
                                     no input_token: (#100) "The parameter input_token is
                                     required". Answers {"data":{"app_id","type":"PAGE"|"USER",
                                     "application","data_access_expires_at","expires_at",
                                     "is_valid","issued_at","profile_id"?,"scopes","user_id"}};
                                     an expired token has is_valid false and
                                     "error":{"code":190,"subcode":463,"message"}; an unknown
                                     one {"data":{"error":{"code":190,"message"},"is_valid":false,
                                     "scopes":[]}}.
  Any Page or Instagram call made with a Page token that lost the permission
  the call needs (PERMISSIONS_NEEDED) answers (#200) or (#10) "Requires <p>
  permission to manage the object" (HTTP 403), as Meta does once a person
  removes it.

Control API:
  POST /_fake/tokens/revoke   {"access_token","permission","code"?: 200 | 10,
                               "revoked"?: true (false gives it back)}
                              -> {"access_token","scopes","revoked":{"<permission>":code}}
  POST /_fake/tokens/update   {"access_token","expires_at"?,"data_access_expires_at"?,
                               "user_id"?}  (unix seconds; 0 = never) -> the debug_token data
  POST /_fake/signed_request  {"user_id","issued_at"?: now,"algorithm"?: "HMAC-SHA256",
                               "secret"?: the app secret (oauth_app_secret),
                               "payload"?: raw JSON text instead}
                              -> {"signed_request","payload"}: base64url(HMAC-SHA256(secret,
                              payload segment)) "." base64url(payload JSON), unpadded, as
                              Meta makes it (sign_request() below, for Python callers too)
"""

import base64
import hashlib
import hmac
import json
import sys

fg = None   # the fake_graph module we were installed into

DATA_ACCESS_DAYS = 90
APPLICATION = "Fake App"

# The permission each endpoint needs, per (node kind, edge, method); kinds
# and edges not listed need none the fake checks.
PERMISSIONS_NEEDED = {
    ("page", "feed", "POST"): "pages_manage_posts",
    ("page", "photos", "POST"): "pages_manage_posts",
    ("page", None, "GET"): "pages_read_engagement",
    ("page", "feed", "GET"): "pages_read_engagement",
    ("page", "published_posts", "GET"): "pages_read_engagement",
    ("page", "posts", "GET"): "pages_read_engagement",
    ("post", None, "GET"): "pages_read_engagement",
    ("photo", None, "GET"): "pages_read_engagement",
    ("post", "comments", "GET"): "pages_read_engagement",
    ("post", "comments", "POST"): "pages_manage_engagement",
    ("comment", None, "GET"): "pages_read_engagement",
    ("comment", "comments", "GET"): "pages_read_engagement",
    ("comment", "comments", "POST"): "pages_manage_engagement",
    ("comment", None, "POST"): "pages_manage_engagement",
    ("comment", None, "DELETE"): "pages_manage_engagement",
    ("ig_user", None, "GET"): "instagram_basic",
    ("ig_user", "media", "GET"): "instagram_basic",
    ("ig_user", "media", "POST"): "instagram_content_publish",
    ("ig_user", "media_publish", "POST"): "instagram_content_publish",
    ("ig_user", "content_publishing_limit", "GET"): "instagram_content_publish",
    ("container", None, "GET"): "instagram_content_publish",
    ("ig_media", None, "GET"): "instagram_basic",
    ("ig_media", "comments", "GET"): "instagram_manage_comments",
    ("ig_comment", None, "GET"): "instagram_manage_comments",
    ("ig_comment", "replies", "GET"): "instagram_manage_comments",
    ("ig_comment", "replies", "POST"): "instagram_manage_comments",
    ("ig_comment", None, "POST"): "instagram_manage_comments",
    ("ig_comment", None, "DELETE"): "instagram_manage_comments",
}
PAGE_SCOPES = ["pages_show_list", "pages_read_engagement", "pages_manage_posts", "pages_manage_engagement",
               "pages_manage_metadata", "pages_read_user_engagement", "instagram_basic",
               "instagram_content_publish", "instagram_manage_comments"]


def _oauth():
    return sys.modules.get("fake_graph_oauth")


def _user_id():
    oauth = _oauth()
    return oauth.OAUTH_USER["id"] if oauth else "100000000000777"


def _details(store, tok):
    """A Page token's record with the fields introspection needs (filled
    in on first use: tokens are made in several places)."""
    if "issued_at" not in tok:
        now = int(store.now())
        tok.update(issued_at=now, expires_at=0, data_access_expires_at=now + DATA_ACCESS_DAYS * 86400,
                   user_id=_user_id(), revoked={})
    return tok


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign_request(payload, secret):
    """Meta's signed_request for a payload (a dict, or JSON text as sent)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    segment = b64url(text.encode("utf-8"))
    sig = hmac.new(secret.encode("utf-8"), segment.encode("ascii"), hashlib.sha256).digest()
    return b64url(sig) + "." + segment


# ---------------------------------------------------------------- Graph

def _check_app_token(app, req):
    if not req.token:
        raise fg.GraphError(104)
    cfg = app.config
    if "|" in req.token:
        app_id, _, secret = req.token.partition("|")
        if app_id == cfg["oauth_app_id"] and hmac.compare_digest(secret, cfg["oauth_app_secret"]):
            return
        raise fg.GraphError(190, message="Invalid OAuth access token signature.")
    raise fg.GraphError(100, message="(#100) You must provide an app access token, or a user access token "
                                     "that is an owner or developer of the app")


def _page_data(app, token, tok):
    s = app.store
    tok = _details(s, tok)
    data = {"app_id": app.config["oauth_app_id"], "type": "PAGE", "application": APPLICATION,
            "data_access_expires_at": tok["data_access_expires_at"], "expires_at": tok["expires_at"],
            "is_valid": True, "issued_at": tok["issued_at"],
            "scopes": [p for p in PAGE_SCOPES if p not in tok["revoked"]], "user_id": tok["user_id"]}
    if tok["accounts"]:
        data["profile_id"] = sorted(tok["accounts"])[0]
    past = tok["expires_at"] and tok["expires_at"] <= s.now()
    if tok["expired"] or past:
        data["is_valid"] = False
        data["error"] = {"code": 190, "subcode": 463,
                         "message": "Error validating access token: Session has expired."}
    return data


def debug_token(app, req):
    _check_app_token(app, req)
    input_token = req.params.get("input_token")
    if not input_token:
        raise fg.GraphError(100, message="(#100) The parameter input_token is required")
    s = app.store
    with s.lock:
        tok = s.tokens.get(input_token)
        if tok is not None:
            return fg.Response(200, {"data": _page_data(app, input_token, tok)})
        user = getattr(s, "user_tokens", {}).get(input_token)
        if user is not None:
            valid = user["expires"] > s.now()
            data = {"app_id": app.config["oauth_app_id"], "type": "USER", "application": APPLICATION,
                    "data_access_expires_at": int(s.now()) + DATA_ACCESS_DAYS * 86400,
                    "expires_at": int(user["expires"]), "is_valid": valid,
                    "issued_at": int(user["expires"]) - (5184000 if user["long_lived"] else 7200),
                    "scopes": list(user["scopes"]), "user_id": _user_id()}
            if not valid:
                data["error"] = {"code": 190, "subcode": 463,
                                 "message": "Error validating access token: Session has expired."}
            return fg.Response(200, {"data": data})
    return fg.Response(200, {"data": {"error": {"code": 190, "message": "Invalid OAuth access token."},
                                      "is_valid": False, "scopes": []}})


def _guard(key, handler):
    """The handler, behind the permission its endpoint needs."""
    needed = PERMISSIONS_NEEDED.get(key)

    def guarded(app, req, obj):
        with app.store.lock:
            tok = app.store.tokens.get(req.token) or {}
            code = needed and tok.get("revoked", {}).get(needed)
            ended = tok.get("expires_at") and tok["expires_at"] <= app.store.now()
        if ended:
            raise fg.GraphError(190, 463)
        if code:
                raise fg.GraphError(code, message="(#%d) Requires %s permission to manage the object"
                                                  % (code, needed))
        return handler(app, req, obj)
    return guarded


# ---------------------------------------------------------------- control

def _token_record(app, body):
    tok = app.store.tokens.get(body.get("access_token"))
    if tok is None:
        raise fg.ControlError("unknown access_token (only Page tokens)", 404)
    return _details(app.store, tok)


def c_revoke(app, params, body):
    perm = body.get("permission")
    if perm not in PAGE_SCOPES:
        raise fg.ControlError("permission must be one of " + ", ".join(PAGE_SCOPES))
    code = body.get("code", 200)
    if code != 10 and not (isinstance(code, int) and 200 <= code <= 299):
        raise fg.ControlError("code must be 10 or 200-299")
    with app.store.lock:
        tok = _token_record(app, body)
        if body.get("revoked", True) is False:
            tok["revoked"].pop(perm, None)
        else:
            tok["revoked"][perm] = code
        return {"access_token": body["access_token"], "revoked": dict(tok["revoked"]),
                "scopes": [p for p in PAGE_SCOPES if p not in tok["revoked"]]}


def c_update(app, params, body):
    with app.store.lock:
        tok = _token_record(app, body)
        for key in ("expires_at", "data_access_expires_at"):
            if key in body:
                if not isinstance(body[key], int) or body[key] < 0:
                    raise fg.ControlError(key + " must be unix seconds (0 = never)")
                tok[key] = body[key]
        if "user_id" in body:
            tok["user_id"] = str(body["user_id"])
        return _page_data(app, body["access_token"], tok)


def c_signed_request(app, params, body):
    if "payload" in body:
        text = body["payload"]
        if not isinstance(text, str):
            raise fg.ControlError("payload must be JSON text")
    else:
        if not body.get("user_id"):
            raise fg.ControlError("user_id is required")
        text = json.dumps({"algorithm": body.get("algorithm", "HMAC-SHA256"),
                           "issued_at": int(body.get("issued_at") or app.store.now()),
                           "user_id": str(body["user_id"])}, separators=(",", ":"))
    secret = body.get("secret") or app.config["oauth_app_secret"]
    return {"signed_request": sign_request(text, secret), "payload": text}


# ---------------------------------------------------------------- install

def install(module):
    """Registers token introspection into a fake_graph module (once), after
    every other extension."""
    global fg
    if getattr(module, "_tokens_installed", False):
        return
    fg = module
    module._tokens_installed = True
    for key, handler in list(module.ROUTES.items()):
        module.ROUTES[key] = _guard(key, handler)
    module.literal_route("GET", "debug_token")(debug_token)
    module.control("POST", "tokens/revoke")(c_revoke)
    module.control("POST", "tokens/update")(c_update)
    module.control("POST", "signed_request")(c_signed_request)


if __name__ == "__main__":
    sys.exit("fake_graph_tokens is part of fake_graph.py; run that instead")

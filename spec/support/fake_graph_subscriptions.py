"""Webhook subscriptions and "Require App Secret" for the fake Graph API
(fake_graph.py), the way Meta's production platform checks them.

fake_graph.py imports this module and calls install(itself) once; everything
here registers into its tables (ROUTES, CONTROL, DEFAULT_CONFIG), so the
request log, scripted failures and usage headers apply here too.

The app is the one of config oauth_app_id / oauth_app_secret (see
fake_graph_oauth.py); its app token is "{oauth_app_id}|{oauth_app_secret}".

Graph endpoints (under /<version>/):
  POST   /{page-id}/subscribed_apps   subscribed_fields=feed[,...] -> {"success":true}
  GET    /{page-id}/subscribed_apps   {"data":[{"id":app id,"name","link","category",
                                                "subscribed_fields":[...]}]}
  DELETE /{page-id}/subscribed_apps   -> {"success":true}
         All three need that Page's own token: a user token gets (#210) "A page
         access token is required to request this resource.", another Page's
         token (#200) on writes and (#100/33) on reads, as for any Page edge.
  POST   /{app-id}/subscriptions      object (page|instagram|user|permissions),
                                      callback_url, fields, verify_token,
                                      include_values? -> {"success":true}
         The fake first makes Meta's verification request:
           GET callback_url?hub.mode=subscribe&hub.challenge=N&hub.verify_token=T
         and refuses the subscription unless it answers 200 with exactly N:
         (#2200) "callback verification failed: ..." (no answer, or not 200),
         (#2201) "response does not match challenge, expected value=..., received=...".
         Meta accepts https callback URLs only; the fake takes http too (tests
         run without TLS). Fields are added to what the object had, each at the
         version of the call that subscribed it (Meta's fields[].version).
  GET    /{app-id}/subscriptions      {"data":[{"object","callback_url","active":true,
                                                "fields":[{"name","version"}]}]}
         Both need the app token: anything else gets (#15) "This method must be
         called with an app access_token."

Require App Secret (config require_appsecret_proof, default false): every call
made with a Page or user token must carry appsecret_proof = hex
HMAC-SHA256(key = oauth_app_secret, message = the token), else code 100
(GraphMethodException): "API calls from the server require an appsecret_proof
argument" when missing, "Invalid appsecret_proof provided in the API argument"
when wrong. App-token calls may carry one; a wrong one is refused too. The
request log shows params.appsecret_proof as "valid", "invalid" or "missing"
(never the value) for every call with a token, whatever the config.

Deliveries (config webhooks_require_subscription, default false): when true,
fake_graph_comments.py's webhook deliveries go out only as Meta's would: a
Page comment when the app has "page"/"feed" and the Page has feed in its
subscribed_apps; an Instagram comment when the app has "instagram"/"comments"
and the account's linked Page has the app in its subscribed_apps.

Control API:
  GET    /_fake/subscriptions         {"app":[...as GET /{app-id}/subscriptions],
                                       "pages":{"<page id>":{"<app id>":[fields]}},
                                       "handshakes":[{"object","callback_url","status",
                                                      "ok","error"}]}
  POST   /_fake/subscribed_apps/drop  {"page_id"} the Page loses every app subscription
                                      (its admin removed the app) -> {"ok":true}
  POST   /_fake/subscriptions/version {"object","field","version"} the app's field as if it had
                                      been subscribed with that version -> {"ok":true}
  POST   /_fake/config                also "require_appsecret_proof",
                                      "webhooks_require_subscription" (booleans)
"""

import hashlib
import hmac
import re
import secrets
import sys
import urllib.error
import urllib.parse
import urllib.request

fg = None   # the fake_graph module we were installed into

HANDSHAKE_TIMEOUT_S = 10
APP_NAME = "sgw (fake app)"
PAGE_FIELDS = ("feed", "mention", "messages", "messaging_postbacks", "message_deliveries",
               "message_reads", "ratings", "name", "picture", "category", "description",
               "website", "email", "live_videos")
OBJECT_FIELDS = {
    "page": PAGE_FIELDS,
    "instagram": ("comments", "live_comments", "mentions", "messages", "story_insights"),
    "user": ("name", "email", "picture", "feed"),
    "permissions": ("pages_show_list", "pages_manage_metadata", "instagram_basic"),
}


# ---------------------------------------------------------------- state

def _reset_with_subscriptions(original):
    def reset(self):
        with self.lock:
            original(self)
            self.app_subscriptions = {}    # object -> {"callback_url","fields":[...],"versions":{field:v},"include_values"}
            self.page_subscriptions = {}   # page id -> {app id: [fields]}
            self.handshakes = []
    return reset


def _app_token(app):
    cfg = app.config
    return "%s|%s" % (cfg["oauth_app_id"], cfg["oauth_app_secret"])


def _is_user_token(app, token):
    with app.store.lock:
        return token in getattr(app.store, "user_tokens", {})


# ---------------------------------------------------------------- appsecret_proof

def _proof_state(app, req):
    if not req.token:
        return None
    given = req.params.get("appsecret_proof")
    if not given:
        return "missing"
    wanted = hmac.new(app.config["oauth_app_secret"].encode(), req.token.encode(), hashlib.sha256).hexdigest()
    return "valid" if hmac.compare_digest(given.lower(), wanted) else "invalid"


def _resolve_with_proof(original):
    def resolve(self, req):
        req.appsecret_proof_state = _proof_state(self, req)
        return original(self, req)
    return resolve


def _safe_params_with_proof(original):
    def safe_params(self):
        out = original(self)
        state = getattr(self, "appsecret_proof_state", None)
        if state:
            out["appsecret_proof"] = state
        return out
    return safe_params


def _check_proof(app, req):
    state = getattr(req, "appsecret_proof_state", None)
    if state == "invalid":
        raise fg.GraphError(100, message="Invalid appsecret_proof provided in the API argument",
                            type_="GraphMethodException")
    if state == "missing" and app.config["require_appsecret_proof"] and req.token != _app_token(app):
        raise fg.GraphError(100, message="API calls from the server require an appsecret_proof argument",
                            type_="GraphMethodException")


# ---------------------------------------------------------------- app subscriptions

def _app_view(app):
    return [{"object": obj, "callback_url": sub["callback_url"], "active": True,
             "fields": [{"name": f, "version": sub["versions"].get(f, app.version)} for f in sub["fields"]]}
            for obj, sub in sorted(app.store.app_subscriptions.items())]


def _split(value):
    return [x.strip() for x in str(value or "").split(",") if x.strip()]


def _handshake(app, obj, callback_url, verify_token):
    """Meta's verification request; raises unless the callback echoes the challenge."""
    challenge = str(secrets.randbelow(10 ** 9) + 10 ** 9)
    sep = "&" if urllib.parse.urlsplit(callback_url).query else "?"
    url = callback_url + sep + urllib.parse.urlencode(
        [("hub.mode", "subscribe"), ("hub.challenge", challenge), ("hub.verify_token", verify_token)])
    status, body, error = None, b"", None
    try:
        r = urllib.request.Request(url, headers={"User-Agent": "facebookplatform/1.0"})
        with fg._OPENER.open(r, timeout=HANDSHAKE_TIMEOUT_S) as resp:
            status, body = resp.status, resp.read(4096)
    except urllib.error.HTTPError as e:
        status = e.code
    except (urllib.error.URLError, OSError, ValueError) as e:
        error = str(getattr(e, "reason", e))
    received = body.decode("utf-8", "replace")
    ok = status == 200 and received == challenge
    with app.store.lock:
        app.store.handshakes.append({"object": obj, "callback_url": callback_url, "status": status,
                                     "ok": ok, "error": error})
    if error is not None:
        raise fg.GraphError(2200, message="(#2200) callback verification failed: Couldn't connect to server "
                                          "(%s)" % error)
    if status != 200:
        raise fg.GraphError(2200, message="(#2200) callback verification failed: Received HTTP code: %s" % status)
    if not ok:
        raise fg.GraphError(2201, message='(#2201) response does not match challenge, expected value="%s", '
                                          'received="%s"' % (challenge, received[:100]))


def app_subscriptions(app, req):
    if not req.token:
        raise fg.GraphError(104)
    if req.token != _app_token(app):
        raise fg.GraphError(15, message="(#15) This method must be called with an app access_token.",
                            type_="OAuthException")
    if req.method == "GET":
        with app.store.lock:
            return fg.Response(200, {"data": _app_view(app)})
    p = req.params
    obj = p.get("object") or ""
    if not obj:
        raise fg.bad_param("The parameter object is required")
    if obj not in OBJECT_FIELDS:
        raise fg.bad_param("Param object must be one of {%s} - got \"%s\""
                           % (", ".join(sorted(OBJECT_FIELDS)), obj))
    callback_url = p.get("callback_url") or ""
    if not callback_url:
        raise fg.bad_param("The parameter callback_url is required")
    parts = urllib.parse.urlsplit(callback_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise fg.bad_param("Param callback_url must be a valid URL")
    fields = _split(p.get("fields"))
    if not fields:
        raise fg.bad_param("The parameter fields is required")
    for i, f in enumerate(fields):
        if f not in OBJECT_FIELDS[obj]:
            raise fg.bad_param("Param fields[%d] must be one of {%s} - got \"%s\""
                               % (i, ", ".join(OBJECT_FIELDS[obj]), f))
    verify_token = p.get("verify_token") or ""
    if not verify_token:
        raise fg.bad_param("The parameter verify_token is required")
    _handshake(app, obj, callback_url, verify_token)
    with app.store.lock:
        sub = app.store.app_subscriptions.setdefault(obj, {"fields": [], "versions": {}})
        sub["callback_url"] = callback_url
        sub["include_values"] = str(p.get("include_values") or "").lower() == "true"
        sub["fields"] += [f for f in fields if f not in sub["fields"]]
        sub["versions"].update({f: req.version for f in fields})
    return fg.Response(200, {"success": True})


# ---------------------------------------------------------------- Page subscriptions

def _page_apps(app, page_id):
    return app.store.page_subscriptions.setdefault(page_id, {})


def list_subscribed_apps(app, req, page):
    with app.store.lock:
        data = [{"category": "Business", "link": "https://www.facebook.com/games/?app_id=%s" % app_id,
                 "name": APP_NAME, "id": app_id, "subscribed_fields": list(fields)}
                for app_id, fields in sorted(_page_apps(app, page["id"]).items())]
    return fg.Response(200, {"data": data})


def subscribe_page(app, req, page):
    fields = _split(req.params.get("subscribed_fields"))
    if not fields:
        raise fg.bad_param("The parameter subscribed_fields is required")
    for i, f in enumerate(fields):
        if f not in PAGE_FIELDS:
            raise fg.bad_param("Param subscribed_fields[%d] must be one of {%s} - got \"%s\""
                               % (i, ", ".join(PAGE_FIELDS), f))
    with app.store.lock:
        apps = _page_apps(app, page["id"])
        have = apps.setdefault(app.config["oauth_app_id"], [])
        have += [f for f in fields if f not in have]
    return fg.Response(200, {"success": True})


def unsubscribe_page(app, req, page):
    with app.store.lock:
        _page_apps(app, page["id"]).pop(app.config["oauth_app_id"], None)
    return fg.Response(200, {"success": True})


# ---------------------------------------------------------------- dispatch

def _dispatch_with_subscriptions(original):
    def dispatch(self, req):
        _check_proof(self, req)
        segs = req.segments
        if len(segs) == 2 and segs[1] == "subscriptions" and segs[0] == self.config["oauth_app_id"] \
                and req.method in ("GET", "POST") and req.version == self.version:
            return app_subscriptions(self, req)
        if len(segs) == 2 and segs[1] == "subscribed_apps" and req.kind == "page" \
                and req.token and _is_user_token(self, req.token):
            raise fg.GraphError(210, message="(#210) A page access token is required to request this resource.",
                                type_="OAuthException")
        return original(self, req)
    return dispatch


# ---------------------------------------------------------------- deliveries

def _delivery_with_subscriptions(original):
    def delivery_for(app, record, verb, by_page=False):
        delivery = original(app, record, verb, by_page)
        if delivery is None or not app.config["webhooks_require_subscription"]:
            return delivery
        s = app.store
        app_id = app.config["oauth_app_id"]
        if delivery["object"] == "page":
            page_id, wanted = record["page_id"], "feed"
        else:
            ig = s.ig_users.get(record["ig_id"]) or {}
            page_id, wanted = ig.get("page_id"), "comments"
        at_app = wanted in s.app_subscriptions.get(delivery["object"], {}).get("fields", [])
        on_page = s.page_subscriptions.get(page_id, {}).get(app_id)
        if not at_app or on_page is None or (delivery["object"] == "page" and "feed" not in on_page):
            return None
        return delivery
    return delivery_for


# ---------------------------------------------------------------- control

def c_subscriptions(app, params, body):
    s = app.store
    with s.lock:
        return {"app": _app_view(app),
                "pages": {pid: {a: list(f) for a, f in apps.items()} for pid, apps in s.page_subscriptions.items()},
                "handshakes": [dict(h) for h in s.handshakes]}


def c_drop(app, params, body):
    page_id = fg.numeric_id(body.get("page_id"))
    with app.store.lock:
        if page_id not in app.store.pages:
            raise fg.ControlError("no Page %s" % page_id, 404)
        app.store.page_subscriptions.pop(page_id, None)
    return {"ok": True}


def c_field_version(app, params, body):
    obj, field, version = body.get("object"), body.get("field"), body.get("version")
    if not isinstance(version, str) or not re.fullmatch(r"v\d+\.\d+", version):
        raise fg.ControlError("version must look like v21.0")
    with app.store.lock:
        sub = app.store.app_subscriptions.get(obj)
        if not sub or field not in sub["fields"]:
            raise fg.ControlError("the app has no %r subscription to %r" % (obj, field), 404)
        sub["versions"][field] = version
    return {"ok": True}


# ---------------------------------------------------------------- install

def install(module):
    """Registers subscriptions and appsecret_proof into a fake_graph module (once)."""
    global fg
    if getattr(module, "_subscriptions_installed", False):
        return
    fg = module
    module._subscriptions_installed = True
    module.Store.reset = _reset_with_subscriptions(module.Store.reset)
    module.DEFAULT_CONFIG.setdefault("require_appsecret_proof", False)
    module.DEFAULT_CONFIG.setdefault("webhooks_require_subscription", False)
    module.App.resolve = _resolve_with_proof(module.App.resolve)
    module.App.dispatch = _dispatch_with_subscriptions(module.App.dispatch)
    module.GraphRequest.safe_params = _safe_params_with_proof(module.GraphRequest.safe_params)
    for method, fn in (("GET", list_subscribed_apps), ("POST", subscribe_page), ("DELETE", unsubscribe_page)):
        module.route("page", "subscribed_apps", method)(fn)
    comments = sys.modules.get("fake_graph_comments")
    if comments is not None:
        comments._delivery_for = _delivery_with_subscriptions(comments._delivery_for)
    module.control("GET", "subscriptions")(c_subscriptions)
    module.control("POST", "subscribed_apps/drop")(c_drop)
    module.control("POST", "subscriptions/version")(c_field_version)


if __name__ == "__main__":
    sys.exit("fake_graph_subscriptions is part of fake_graph.py; run that instead")

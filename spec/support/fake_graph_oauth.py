"""Facebook Login for the fake Graph API (fake_graph.py): the OAuth dialog a
browser is sent to, the token endpoints, and the user-token calls that list
the Pages a person manages (the Graph API notes' "Connecting Pages").

fake_graph.py imports this module and calls install(itself) once; everything
here registers into its tables (LITERAL_ROUTES, CONTROL, DEFAULT_CONFIG), so
the request log, scripted failures and usage headers apply here too.

There is one fake person, "Fake User", who manages every Page created with
POST /_fake/pages (and so their Instagram business accounts). The app is the
one of config oauth_app_id / oauth_app_secret.

Graph endpoints (under /<version>/, like the rest of the fake):
  GET  /dialog/oauth?client_id&redirect_uri&state&scope&response_type=code
         Meta's dialog (www.facebook.com in real life). config oauth_auto:
         "none" (default): an HTML page, "Continue" (id continue) and "Cancel"
           (id cancel), which POSTs to /dialog/oauth/decide;
         "approve": 302 to redirect_uri?code=..&state=..#_=_ at once;
         "deny": 302 to redirect_uri?error=access_denied&error_code=200&
           error_description=Permissions+error&error_reason=user_denied&state=..#_=_
         A wrong client_id, or a redirect_uri that is not an absolute http(s)
         URL, gives an HTML error page (400) and no redirect, as Meta does.
  POST /dialog/oauth/decide          dialog, decision=continue|cancel -> the 302 above
  GET|POST /oauth/access_token       client_id, client_secret, redirect_uri, code
                                     -> {"access_token","token_type":"bearer","expires_in"}
                                     (a short-lived user token); or grant_type=fb_exchange_token,
                                     client_id, client_secret, fb_exchange_token -> a long-lived one
  GET  /me                           user token: {"id","name"}; Page token: the Page's
  GET  /me/accounts                  user token: the Pages, fields as asked (default
                                     id,name,access_token,category,tasks), including
                                     instagram_business_account{id,username}; cursor paging
  GET  /me/permissions               {"data":[{"permission","status":"granted"}]} (the dialog's scope)

Errors, as Meta words them where the notes or public clients show it (the
subcodes of bad codes are unconfirmed):
  client_id not the app's            101 "Error validating application. Invalid application ID."
  client_secret wrong                1   "Error validating client secret."
  redirect_uri not the dialog's      100/36008 "Error validating verification code. Please make
                                     sure your redirect_uri is identical to the one you used in
                                     the OAuth dialog request"
  code unknown                       100/36007 "Invalid verification code format."
  code used already                  100/36009 "This authorization code has been used."
  code older than 10 minutes         100/36007 "This authorization code has expired."
  fb_exchange_token unknown          190/467; no token on /me...: 104; a user token's own
                                     expiry: 190/463 (POST /_fake/tokens/expire does not reach
                                     user tokens; they last 2 hours / 60 days of the fake's clock)

Control API:
  POST /_fake/config                 also "oauth_auto": "none" | "approve" | "deny",
                                     "oauth_app_id", "oauth_app_secret" (non-empty strings)
  GET  /_fake/oauth                  {"user":{"id","name"},"app_id","dialogs":[{"client_id",
                                      "redirect_uri","scope","state","decision"}],
                                      "codes_issued","codes_used","user_tokens"}
  POST /_fake/oauth/user_token       {"long_lived"?: false, "scopes"?: [...]} -> {"access_token",
                                      "expires_in"}: a user token, as the dialog's code gives one
"""

import html
import secrets
import sys
import urllib.parse

fg = None   # the fake_graph module we were installed into

OAUTH_USER = {"id": "100000000000777", "name": "Fake User"}
CODE_TTL = 600                     # Meta's codes live about ten minutes
SHORT_TTL = 2 * 3600               # a user token from a code: about two hours
LONG_TTL = 60 * 24 * 3600          # after fb_exchange_token: about sixty days
AUTO_MODES = ("none", "approve", "deny")
STRING_CONFIG = {"oauth_auto": "none", "oauth_app_id": "100000000000123",
                 "oauth_app_secret": "fake-app-secret"}
PAGE_TASKS = ["ANALYZE", "ADVERTISE", "MODERATE", "CREATE_CONTENT", "MANAGE"]


# ---------------------------------------------------------------- state

def _reset_with_oauth(original):
    def reset(self):
        with self.lock:
            original(self)
            self.oauth_dialogs = {}      # dialog id -> the dialog's parameters and decision
            self.oauth_codes = {}        # code -> {"redirect_uri","scopes","created","used"}
            self.user_tokens = {}        # token -> {"scopes","expires","long_lived"}
    return reset


def _oauth_error(code, subcode=None, message=None, http=400):
    return fg.GraphError(code, subcode, message, http=http, type_="OAuthException")


def _check_app(app, req, need_secret=True):
    cfg = app.config
    if req.params.get("client_id") != cfg["oauth_app_id"]:
        raise _oauth_error(101, message="Error validating application. Invalid application ID.")
    if need_secret and req.params.get("client_secret") != cfg["oauth_app_secret"]:
        raise _oauth_error(1, message="Error validating client secret.")


def _user_token(app, req):
    """The record of the request's user token; raises as Meta would."""
    if not req.token:
        raise fg.GraphError(104)
    s = app.store
    with s.lock:
        tok = s.user_tokens.get(req.token)
        if tok is None:
            raise fg.GraphError(190, 467)
        if tok["expires"] <= s.now():
            raise fg.GraphError(190, 463)
        return dict(tok)


def _issue_user_token(app, scopes, long_lived):
    s = app.store
    token = "EAAuser" + secrets.token_urlsafe(32)
    ttl = LONG_TTL if long_lived else SHORT_TTL
    with s.lock:
        s.user_tokens[token] = {"scopes": list(scopes), "expires": s.now() + ttl, "long_lived": long_lived}
    return {"access_token": token, "token_type": "bearer", "expires_in": ttl}


def _new_user_token(app, scopes, long_lived):
    return fg.Response(200, _issue_user_token(app, scopes, long_lived))


# ---------------------------------------------------------------- the dialog

def _page_html(status, title, body):
    doc = ("<!doctype html><html lang=en><head><meta charset=utf-8>"
           "<meta name=viewport content='width=device-width, initial-scale=1'>"
           "<title>%s</title><style>"
           "body{font:16px/1.5 system-ui,'DejaVu Sans',sans-serif;background:#f0f2f5;margin:0;color:#1c1e21}"
           ".box{max-width:420px;margin:2rem auto;background:#fff;border-radius:8px;padding:1.5rem;"
           "box-shadow:0 1px 3px rgba(0,0,0,.2)}h1{font-size:1.25rem;margin:0 0 .75rem}"
           ".bar{background:#1877f2;color:#fff;padding:.6rem 1rem;font-weight:700}"
           "button{font:inherit;font-weight:600;padding:.6rem 1rem;border-radius:6px;border:0;cursor:pointer}"
           "#continue{background:#1877f2;color:#fff}#cancel{background:#e4e6eb}"
           "ul{padding-left:1.2rem}.row{display:flex;gap:.5rem;margin-top:1rem}</style></head>"
           "<body><div class=bar>facebook (fake)</div><div class=box>%s</div></body></html>"
           % (html.escape(title), body))
    return fg.Response(status, doc.encode(), "text/html; charset=utf-8")


def _redirect(url, params):
    sep = "&" if urllib.parse.urlsplit(url).query else "?"
    location = url.split("#")[0] + sep + urllib.parse.urlencode(params) + "#_=_"
    return fg.Response(302, b"", "text/html; charset=utf-8", {"Location": location})


def _decide(app, dialog, decision):
    """The dialog's outcome: a code for the redirect URI, or the denial."""
    s = app.store
    with s.lock:
        dialog["decision"] = decision
        if decision != "continue":
            return _redirect(dialog["redirect_uri"], [
                ("error", "access_denied"), ("error_code", "200"),
                ("error_description", "Permissions error"), ("error_reason", "user_denied"),
                ("state", dialog["state"])])
        code = "AQ" + secrets.token_urlsafe(48)
        s.oauth_codes[code] = {"redirect_uri": dialog["redirect_uri"], "scopes": dialog["scopes"],
                               "created": s.now(), "used": False}
    return _redirect(dialog["redirect_uri"], [("code", code), ("state", dialog["state"])])


def dialog(app, req):
    p = req.params
    if p.get("client_id") != app.config["oauth_app_id"]:
        return _page_html(400, "Error", "<h1>Invalid App ID</h1><p>The provided app ID does not look "
                                        "like a valid app ID.</p>")
    redirect_uri = p.get("redirect_uri") or ""
    if urllib.parse.urlsplit(redirect_uri).scheme not in ("http", "https") or \
            not urllib.parse.urlsplit(redirect_uri).netloc:
        return _page_html(400, "Error", "<h1>URL blocked</h1><p>This redirect failed because the redirect "
                                        "URI is not whitelisted in the app's Client OAuth Settings.</p>")
    if (p.get("response_type") or "code") != "code":
        return _page_html(400, "Error", "<h1>Error</h1><p>The fake dialog supports response_type=code only.</p>")
    scopes = [x for x in (p.get("scope") or "").replace(",", " ").split() if x]
    s = app.store
    with s.lock:
        dialog_id = secrets.token_urlsafe(12)
        record = {"client_id": p["client_id"], "redirect_uri": redirect_uri, "scopes": scopes,
                  "state": p.get("state") or "", "decision": None}
        s.oauth_dialogs[dialog_id] = record
        mode = app.config["oauth_auto"]
        pages = [pg["name"] for pg in s.pages.values()]
    if mode == "approve":
        return _decide(app, record, "continue")
    if mode == "deny":
        return _decide(app, record, "cancel")
    items = "".join("<li>%s</li>" % html.escape(x) for x in scopes) or "<li>public_profile</li>"
    page_items = "".join("<li>%s</li>" % html.escape(n) for n in pages) or "<li>(no Pages)</li>"
    body = ("<h1>Continue as %s?</h1><p>The app will receive:</p><ul>%s</ul>"
            "<p>Pages it may use:</p><ul id=pages>%s</ul>"
            "<form method=post action='/%s/dialog/oauth/decide'>"
            "<input type=hidden name=dialog value='%s'><div class=row>"
            "<button id=continue name=decision value=continue>Continue</button>"
            "<button id=cancel name=decision value=cancel>Cancel</button></div></form>"
            % (html.escape(OAUTH_USER["name"]), items, page_items, html.escape(app.version),
               html.escape(dialog_id)))
    return _page_html(200, "Log in with Facebook", body)


def decide(app, req):
    with app.store.lock:
        record = app.store.oauth_dialogs.get(req.params.get("dialog") or "")
        if record is None or record["decision"] is not None:
            return _page_html(400, "Error", "<h1>This dialog has expired</h1><p>Start again from the app.</p>")
    return _decide(app, record, "continue" if req.params.get("decision") == "continue" else "cancel")


# ---------------------------------------------------------------- tokens

def access_token(app, req):
    p = req.params
    s = app.store
    if p.get("grant_type") == "fb_exchange_token":
        _check_app(app, req)
        with s.lock:
            tok = s.user_tokens.get(p.get("fb_exchange_token") or "")
            if tok is None or tok["expires"] <= s.now():
                raise fg.GraphError(190, 467)
            scopes = tok["scopes"]
        return _new_user_token(app, scopes, True)
    _check_app(app, req)
    with s.lock:
        code = s.oauth_codes.get(p.get("code") or "")
        if code is None:
            raise _oauth_error(100, 36007, "Invalid verification code format.")
        if code["redirect_uri"] != p.get("redirect_uri"):
            raise _oauth_error(100, 36008, "Error validating verification code. Please make sure your "
                                           "redirect_uri is identical to the one you used in the OAuth "
                                           "dialog request")
        if code["used"]:
            raise _oauth_error(100, 36009, "This authorization code has been used.")
        if s.now() - code["created"] > CODE_TTL:
            raise _oauth_error(100, 36007, "This authorization code has expired.")
        code["used"] = True
        scopes = code["scopes"]
    return _new_user_token(app, scopes, False)


# ---------------------------------------------------------------- /me

def _page_record(app, page):
    ig = app.store.ig_users.get(page["ig_id"]) if page.get("ig_id") else None
    out = {"id": page["id"], "name": page["name"], "access_token": page["access_token"],
           "category": "Brand", "category_list": [{"id": "1605186416478696", "name": "Brand"}],
           "tasks": list(PAGE_TASKS)}
    if ig:
        out["instagram_business_account"] = {"id": ig["id"], "username": ig["username"],
                                             "name": ig["username"]}
    return out


def me(app, req):
    with app.store.lock:
        for page in app.store.pages.values():
            if req.token and req.token == page["access_token"]:
                return fg.Response(200, {"id": page["id"], "name": page["name"]})
    _user_token(app, req)
    return fg.Response(200, dict(OAUTH_USER))


def me_accounts(app, req):
    tok = _user_token(app, req)
    s = app.store
    with s.lock:
        pages = [] if "pages_show_list" not in tok["scopes"] else \
            [_page_record(app, p) for p in s.pages.values()]
    fields = fg.parse_fields(req.params.get("fields") or "id,name,access_token,category,tasks")
    limit = req.int_param("limit", fg.DEFAULT_LIMIT, 1, fg.MAX_LIMIT)
    start = fg.decode_cursor(req.params["after"]) if req.params.get("after") else 0
    chunk = pages[start:start + limit]
    data = [{name: fg.select(rec[name], sub) for name, sub in fields if name in rec} for rec in chunk]
    out = {"data": data}
    if chunk:
        out["paging"] = {"cursors": {"before": fg.encode_cursor(start),
                                     "after": fg.encode_cursor(start + len(chunk))}}
        if start + len(chunk) < len(pages):
            out["paging"]["next"] = app.page_link(req, "after", fg.encode_cursor(start + len(chunk)))
    return fg.Response(200, out)


def me_permissions(app, req):
    tok = _user_token(app, req)
    return fg.Response(200, {"data": [{"permission": p, "status": "granted"} for p in tok["scopes"]]})


# ---------------------------------------------------------------- control

def _set_config_with_oauth(original):
    def set_config(app, params, body):
        strings = {k: body.pop(k) for k in list(body) if k in STRING_CONFIG}
        for k, v in strings.items():
            if not isinstance(v, str) or not v:
                raise fg.ControlError("config %s must be a non-empty string" % k)
            if k == "oauth_auto" and v not in AUTO_MODES:
                raise fg.ControlError("config oauth_auto must be one of %s" % ", ".join(AUTO_MODES))
        with app.store.lock:
            app.store.config.update(strings)
        return original(app, params, body)
    return set_config


def c_oauth(app, params, body):
    s = app.store
    with s.lock:
        return {"user": dict(OAUTH_USER), "app_id": s.config["oauth_app_id"],
                "dialogs": [{"client_id": d["client_id"], "redirect_uri": d["redirect_uri"],
                             "scope": ",".join(d["scopes"]), "state": d["state"], "decision": d["decision"]}
                            for d in s.oauth_dialogs.values()],
                "codes_issued": len(s.oauth_codes),
                "codes_used": sum(1 for c in s.oauth_codes.values() if c["used"]),
                "user_tokens": len(s.user_tokens)}


def c_user_token(app, params, body):
    scopes = body.get("scopes", ["pages_show_list", "pages_manage_posts"])
    if not isinstance(scopes, list) or not all(isinstance(x, str) for x in scopes):
        raise fg.ControlError("scopes must be a list of strings")
    return _issue_user_token(app, scopes, body.get("long_lived") is True)


# ---------------------------------------------------------------- install

def install(module):
    """Registers Facebook Login into a fake_graph module (once per module)."""
    global fg
    if getattr(module, "_oauth_installed", False):
        return
    fg = module
    module._oauth_installed = True
    module.Store.reset = _reset_with_oauth(module.Store.reset)
    for key, value in STRING_CONFIG.items():
        module.DEFAULT_CONFIG.setdefault(key, value)
    for method, path, fn in [("GET", "dialog/oauth", dialog), ("POST", "dialog/oauth/decide", decide),
                             ("GET", "oauth/access_token", access_token),
                             ("POST", "oauth/access_token", access_token),
                             ("GET", "me", me), ("GET", "me/accounts", me_accounts),
                             ("GET", "me/permissions", me_permissions)]:
        module.literal_route(method, path)(fn)
    module.CONTROL[("POST", "config")] = _set_config_with_oauth(module.CONTROL[("POST", "config")])
    module.control("GET", "oauth")(c_oauth)
    module.control("POST", "oauth/user_token")(c_user_token)


if __name__ == "__main__":
    sys.exit("fake_graph_oauth is part of fake_graph.py; run that instead")

"""Comments for the fake Graph API (fake_graph.py): comment objects on Page
posts and Instagram media, the read, reply, hide and delete endpoints with
Meta's shapes and errors, and signed webhook deliveries (Meta -> sgw) of
what users do, so that specs can drop one and watch the periodic sync find it.

fake_graph.py imports this module and calls install(itself) once; everything
here registers into its tables (ROUTES, CONTROL, FIELDS, ...), so the HTTP
plumbing, scripted failures and usage headers apply to these endpoints too.

Graph endpoints (the notes' "Comments"):
  GET    /{post}/comments            filter=toplevel (default) | stream, order=chronological
                                     (default) | reverse_chronological, cursor paging
  POST   /{post}/comments            message -> {"id"}     (the Page comments on its post)
  GET    /{comment}[/comments]       a comment; its replies
  POST   /{comment}/comments         message -> {"id"}     (a reply; a reply to a reply joins
                                                            the thread of its top-level comment)
  POST   /{comment}                  is_hidden=true|false -> {"success":true}; message (own comments)
  DELETE /{comment}                  -> {"success":true}
  GET    /{media}/comments           top-level comments, newest first, with `replies` embedded
                                     (at most config comment_replies_embedded, then paging.next)
  GET    /{ig-comment}[/replies]     a comment; its replies, oldest first
  POST   /{ig-comment}/replies       message -> {"id"}     (top-level comments only)
  POST   /{ig-comment}               hide=true|false -> {"success":true}
  DELETE /{ig-comment}               -> {"success":true}
A Page or Instagram account cannot hide its own comments (code 100), nor a
comment created with "can_hide": false (Meta says so of some others too).

Control API:
  POST /_fake/webhooks               {"callback_url","app_secret"} where deliveries go
  GET  /_fake/webhooks               {"callback_url","deliveries":[{"seq","object","status","error","body"}]}
  POST /_fake/comments               {"post_id"|"media_id","message"|"text","from"?:{"id","name"|"username"},
                                      "parent_id"?,"like_count"?,"can_hide"?:true,"deliver"?:true,
                                      "written_seconds_ago"?:0}
                                     (written_seconds_ago: a delivery Meta retried that long after
                                      the comment was written; Instagram's entry time is the send time)
                                     -> {"comment":{...},"delivery":{"status","error"}|null}
  GET  /_fake/comments[?post_id=&media_id=&account=]   every comment, deleted ones included
  POST /_fake/comments/{id}/edit     {"message","deliver"?}      verb edited (any comment)
  POST /_fake/comments/{id}/remove   {"deliver"?}                verb remove
  POST /_fake/comments/{id}/hide     {"deliver"?}                verb hide
  POST /_fake/comments/{id}/unhide   {"deliver"?}                verb unhide
  POST /_fake/comments/{id}/redeliver                           Meta retrying the creation's delivery:
                                                                its first payload, sent again now
                                     -> {"delivery":{"status","error"}}
Instagram's comments webhook reports creations only: the other verbs change
an Instagram comment without a delivery (delivery null). A delivery's `from`
is who made the change, as Meta sends it: the Page for hides and unhides
(only the Page can) and for a deletion through the Graph API; the author
otherwise.

Deliveries from control calls are sent before the call answers (their status
is in the answer); those caused by Graph calls (the Page's own replies, hides
and deletions, which Meta reports too) are sent in the background.
"""

import hashlib
import json
import hmac
import re
import sys
import threading
import urllib.error
import urllib.request

fg = None   # the fake_graph module we were installed into

FB_MESSAGE_MAX = 8000
IG_TEXT_MAX = 2200
WEBHOOK_TIMEOUT_S = 10
DELIVERY_LOG_MAX = 1000

COMMENT_KINDS = ("comment", "ig_comment")


# ---------------------------------------------------------------- state

def _reset_with_comments(original):
    def reset(self):
        with self.lock:
            original(self)
            self.comments = []           # every comment, in creation order
            self.webhook = {"callback_url": None, "app_secret": None}
            self.deliveries = []         # what we sent, oldest first
    return reset


def _truthy(value, name):
    value = str(value).strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise fg.bad_param("Param %s must be a boolean" % name)


def _account_itself(app, platform, account_id):
    """`from` of what the Page or Instagram account writes itself."""
    s = app.store
    if platform == "facebook":
        return {"id": account_id, "name": s.pages[account_id]["name"]}
    return {"id": account_id, "username": s.ig_users[account_id]["username"]}


def _new_comment(app, platform, parent_obj, text, author, parent=None, like_count=0):
    """A comment on a Page post or Instagram media (parent_obj), or a reply
    when parent (a top-level comment record) is given. Caller holds the lock."""
    s = app.store
    if platform == "facebook":
        post = parent_obj
        cid = "%s_%s" % (post["post_id"], s.new_id(16))
        record = {"id": cid, "kind": "comment", "platform": "facebook", "account": post["page_id"],
                  "page_id": post["page_id"], "post_id": post["id"], "message": text}
    else:
        media = parent_obj
        cid = s.new_id(17, "17")
        record = {"id": cid, "kind": "ig_comment", "platform": "instagram", "account": media["ig_id"],
                  "ig_id": media["ig_id"], "media_id": media["id"], "message": text}
    record.update(parent_id=parent["id"] if parent else None, from_=dict(author),
                  created=s.now(), seq=s.next_seq(), hidden=False, deleted=False,
                  like_count=int(like_count or 0))
    record["own"] = record["from_"].get("id") == record["account"]
    record["can_hide"] = not record["own"]
    s.comments.append(record)
    s.add_object(record["kind"], record)
    return record


def _comments_of(app, parent_key, parent_id, top_level_only):
    return [c for c in app.store.comments
            if c.get(parent_key) == parent_id and not c["deleted"]
            and (not top_level_only or c["parent_id"] is None)]


def _replies_of(app, comment):
    return [c for c in app.store.comments if c["parent_id"] == comment["id"] and not c["deleted"]]


def _view(record):
    """The control API's view: everything, deleted ones too."""
    out = {k: v for k, v in record.items() if k not in ("from_", "seq", "add_delivery")}
    out["from"] = record["from_"]
    out["created_time"] = fg.fmt_time(record["created"])
    return out


# ---------------------------------------------------------------- paging

def _paginate_ascending(app, req, items, kind):
    """Oldest first; cursors as fake_graph's (the seq of the first/last item)."""
    limit = req.int_param("limit", fg.DEFAULT_LIMIT, 1, fg.MAX_LIMIT)
    after, before = req.params.get("after"), req.params.get("before")
    if after:
        cut = fg.decode_cursor(after)
        page = [i for i in items if i["seq"] > cut][:limit]
    elif before:
        cut = fg.decode_cursor(before)
        page = [i for i in items if i["seq"] < cut][-limit:]
    else:
        page = items[:limit]
    out = {"data": [app.render(kind, i, req.fields(kind)) for i in page]}
    if page:
        first, last = page[0]["seq"], page[-1]["seq"]
        paging = {"cursors": {"before": fg.encode_cursor(first), "after": fg.encode_cursor(last)}}
        if any(i["seq"] < first for i in items):
            paging["previous"] = app.page_link(req, "before", fg.encode_cursor(first))
        if any(i["seq"] > last for i in items):
            paging["next"] = app.page_link(req, "after", fg.encode_cursor(last))
        out["paging"] = paging
    return out


def _ordered(req, items):
    order = req.params.get("order") or "chronological"
    if order not in ("chronological", "reverse_chronological"):
        raise fg.bad_param("Param order must be one of {chronological, reverse_chronological}")
    items = sorted(items, key=lambda c: c["seq"])
    return items, order


def _page(app, req, items, kind):
    items, order = _ordered(req, items)
    if order == "chronological":
        return _paginate_ascending(app, req, items, kind)
    return app.paginate(req, list(reversed(items)), kind)


# ---------------------------------------------------------------- webhooks

def _sign(secret, body):
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _delivery_for(app, record, verb, by_page=False):
    """Meta's delivery for a change of this comment (None: Meta sends none).
    `from` is who made the change: the author, or the Page itself for what
    only the Page can do (hides) or did (by_page: its own deletion)."""
    s = app.store
    now = int(s.now())
    if record["platform"] == "facebook":
        actor = record["from_"]
        if by_page or verb in ("hide", "unhide"):
            actor = _account_itself(app, "facebook", record["account"])
        value = {"from": actor, "post_id": record["post_id"], "comment_id": record["id"],
                 "parent_id": record["parent_id"] or record["post_id"],
                 # The time of the change: creation for add, now for the others.
                 "created_time": int(record["created"]) if verb == "add" else now,
                 "item": "comment", "verb": verb}
        if verb in ("add", "edited"):
            value["message"] = record["message"]
        return {"object": "page", "entry": [{"id": record["page_id"], "time": now,
                                            "changes": [{"field": "feed", "value": value}]}]}
    if verb != "add":
        return None
    value = {"from": record["from_"], "media": {"id": record["media_id"], "media_product_type": "FEED"},
             "id": record["id"], "text": record["message"]}
    if record["parent_id"]:
        value["parent_id"] = record["parent_id"]
    return {"object": "instagram", "entry": [{"id": record["ig_id"], "time": now,
                                             "changes": [{"field": "comments", "value": value}]}]}


def _send(app, delivery):
    """POSTs one delivery, signed; returns {"status","error"} (also logged)."""
    s = app.store
    with s.lock:
        url, secret = s.webhook["callback_url"], s.webhook["app_secret"]
    if not url:
        return {"status": None, "error": "no callback_url configured (POST /_fake/webhooks)"}
    body = fg.to_json(delivery).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "facebookexternalua",
        "X-Hub-Signature-256": _sign(secret or "", body)})
    status, error = None, None
    try:
        with fg._OPENER.open(req, timeout=WEBHOOK_TIMEOUT_S) as resp:
            status = resp.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (urllib.error.URLError, OSError, ValueError) as e:
        error = str(e)
    with s.lock:
        entry = {"seq": len(s.deliveries) + 1, "object": delivery["object"], "status": status,
                 "error": error, "body": body.decode()}
        s.deliveries.append(entry)
        del s.deliveries[:-DELIVERY_LOG_MAX]
    return {"status": status, "error": error}


def _notify(app, record, verb, deliver=True, background=False, by_page=False):
    """Sends the delivery for a change, unless asked not to or Meta sends none."""
    with app.store.lock:
        delivery = _delivery_for(app, record, verb, by_page)
        if verb == "add" and delivery is not None:
            record["add_delivery"] = json.loads(json.dumps(delivery))   # what a retry sends again
    if not deliver or delivery is None:
        return None
    if background:
        threading.Thread(target=_send, args=(app, delivery), daemon=True).start()
        return None
    return _send(app, delivery)


# ---------------------------------------------------------------- Graph endpoints

def _message(req, maximum):
    text = req.params.get("message", "")
    if not text.strip():
        raise fg.bad_param("Missing message")
    if len(text) > maximum:
        raise fg.bad_param("Param message must be at most %d characters long" % maximum)
    return text


def _check_alive(record, req):
    if record["deleted"]:
        raise fg.unsupported(req.method, record["id"])


def list_post_comments(app, req, post):
    flt = req.params.get("filter") or "toplevel"
    if flt not in ("toplevel", "stream"):
        raise fg.bad_param("Param filter must be one of {toplevel, stream}")
    with app.store.lock:
        items = _comments_of(app, "post_id", post["id"], flt == "toplevel")
        return fg.Response(200, _page(app, req, items, "comment"))


def comment_on_post(app, req, post):
    text = _message(req, FB_MESSAGE_MAX)
    with app.store.lock:
        record = _new_comment(app, "facebook", post, text, _account_itself(app, "facebook", post["page_id"]))
    _notify(app, record, "add", background=True)
    return fg.Response(200, {"id": record["id"]})


def get_comment(app, req, record):
    with app.store.lock:
        _check_alive(record, req)
        return fg.Response(200, app.render(req.kind, record, req.fields(req.kind)))


def list_replies(app, req, record):
    with app.store.lock:
        _check_alive(record, req)
        items = sorted(_replies_of(app, record), key=lambda c: c["seq"])
        if record["platform"] == "instagram":
            return fg.Response(200, _paginate_ascending(app, req, items, "ig_comment"))
        return fg.Response(200, _page(app, req, items, "comment"))


def reply(app, req, record):
    facebook = record["platform"] == "facebook"
    text = _message(req, FB_MESSAGE_MAX if facebook else IG_TEXT_MAX)
    s = app.store
    with s.lock:
        _check_alive(record, req)
        thread = record
        if record["parent_id"]:
            if not facebook:
                raise fg.bad_param("Replies can only be made to top-level comments; comment %s is a reply"
                                   % record["id"])
            # Facebook threads are one level deep: the reply joins the thread.
            thread = s.objects[record["parent_id"]][1]
        parent_obj = s.objects[record["post_id"]][1] if facebook else s.objects[record["media_id"]][1]
        new = _new_comment(app, record["platform"], parent_obj, text,
                           _account_itself(app, record["platform"], record["account"]), parent=thread)
    # Meta reports the Page's own comments too (Instagram: creations by others only).
    if facebook:
        _notify(app, new, "add", background=True)
    return fg.Response(200, {"id": new["id"]})


def update_comment(app, req, record):
    facebook = record["platform"] == "facebook"
    key = "is_hidden" if facebook else "hide"
    s = app.store
    verb = None
    with s.lock:
        _check_alive(record, req)
        if key in req.params:
            hidden = _truthy(req.params[key], key)
            if record["own"]:
                raise fg.bad_param("%s cannot hide its own comments (can_hide is false on comment %s)"
                                   % ("A Page" if facebook else "An Instagram account", record["id"]))
            if not record["can_hide"]:
                raise fg.bad_param("Comment %s cannot be hidden (can_hide is false)" % record["id"])
            if record["hidden"] != hidden:
                record["hidden"] = hidden
                verb = "hide" if hidden else "unhide"
        elif facebook and "message" in req.params:
            if not record["own"]:
                raise fg.GraphError(200, message="(#200) A Page can edit only its own comments")
            record["message"] = _message(req, FB_MESSAGE_MAX)
            verb = "edited"
        else:
            raise fg.bad_param("No parameter to update: give %s" % key)
    if verb:
        _notify(app, record, verb, background=True)
    return fg.Response(200, {"success": True})


def delete_comment(app, req, record):
    s = app.store
    with s.lock:
        _check_alive(record, req)
        record["deleted"] = True
        s.objects.pop(record["id"], None)
    _notify(app, record, "remove", background=True, by_page=True)
    return fg.Response(200, {"success": True})


def list_media_comments(app, req, media):
    with app.store.lock:
        items = sorted(_comments_of(app, "media_id", media["id"], True), key=lambda c: -c["seq"])
        return fg.Response(200, app.paginate(req, items, "ig_comment"))


# ---------------------------------------------------------------- fields

def _fb_fields():
    def parent(app, c):
        return {"id": c["parent_id"]} if c["parent_id"] else fg.MISSING
    return {
        "id": lambda app, c: c["id"],
        "message": lambda app, c: c["message"],
        "from": lambda app, c: dict(c["from_"]),
        "created_time": lambda app, c: fg.fmt_time(c["created"]),
        "like_count": lambda app, c: c["like_count"],
        "comment_count": lambda app, c: len(_replies_of(app, c)),
        "is_hidden": lambda app, c: c["hidden"],
        "can_hide": lambda app, c: c["can_hide"],
        "can_remove": lambda app, c: True,
        "can_comment": lambda app, c: True,
        "parent": parent,
        "object": lambda app, c: {"id": c["post_id"]},
        "permalink_url": lambda app, c: "https://www.facebook.com/%s?comment_id=%s"
                                        % (c["post_id"].replace("_", "/posts/", 1), c["id"].split("_")[-1]),
    }


def _ig_fields():
    def replies(app, c):
        if c["parent_id"]:
            return fg.MISSING
        items = sorted(_replies_of(app, c), key=lambda r: r["seq"])
        if not items:
            return fg.MISSING
        shown = items[:int(app.config.get("comment_replies_embedded", 25))]
        full = lambda r: {k: g(app, r) for k, g in REPLY_FIELDS.items() if g(app, r) is not fg.MISSING}
        out = {"data": [full(r) for r in shown]}
        if len(shown) < len(items):
            out["paging"] = {"cursors": {"before": fg.encode_cursor(shown[0]["seq"]),
                                         "after": fg.encode_cursor(shown[-1]["seq"])},
                             "next": "https://graph.facebook.com/%s/%s/replies?after=%s"
                                     % (app.version, c["id"], fg.encode_cursor(shown[-1]["seq"]))}
        return out
    fields = dict(REPLY_FIELDS)
    fields["parent_id"] = lambda app, c: c["parent_id"] or fg.MISSING
    fields["replies"] = replies
    fields["media"] = lambda app, c: {"id": c["media_id"]}
    return fields


REPLY_FIELDS = {
    "id": lambda app, c: c["id"],
    "text": lambda app, c: c["message"],
    "username": lambda app, c: c["from_"].get("username", ""),
    "from": lambda app, c: dict(c["from_"]),
    "timestamp": lambda app, c: fg.fmt_time(c["created"]),
    "like_count": lambda app, c: c["like_count"],
    "hidden": lambda app, c: c["hidden"],
}


# ---------------------------------------------------------------- control API

def _find_parent_object(app, body):
    s = app.store
    if body.get("post_id"):
        kind, obj = s.lookup(str(body["post_id"]))
        if kind != "post":
            raise fg.ControlError("no Page post %r" % body["post_id"], 404)
        return obj, "facebook"
    if body.get("media_id"):
        kind, obj = s.lookup(str(body["media_id"]))
        if kind != "ig_media":
            raise fg.ControlError("no Instagram media %r" % body["media_id"], 404)
        return obj, "instagram"
    raise fg.ControlError("give post_id or media_id")


def _author(app, body, platform):
    given = body.get("from") or {}
    if not isinstance(given, dict):
        raise fg.ControlError("from must be an object")
    s = app.store
    if platform == "facebook":
        return {"id": str(given.get("id") or s.new_id(15, "10")), "name": given.get("name") or "Fake User"}
    return {"id": str(given.get("id") or s.new_id(17, "17")), "username": given.get("username") or "fake_user"}


def c_create_comment(app, params, body):
    text = body.get("message", body.get("text"))
    if not isinstance(text, str):
        raise fg.ControlError("message must be a string")
    s = app.store
    with s.lock:
        obj, platform = _find_parent_object(app, body)
        parent = None
        if body.get("parent_id"):
            kind, parent = s.lookup(str(body["parent_id"]))
            if kind not in COMMENT_KINDS or parent.get("post_id", parent.get("media_id")) != obj["id"]:
                raise fg.ControlError("no comment %r on %s" % (body["parent_id"], obj["id"]), 404)
            if parent["parent_id"]:
                parent = s.objects[parent["parent_id"]][1]   # threads are one level deep
        record = _new_comment(app, platform, obj, text, _author(app, body, platform), parent=parent,
                              like_count=body.get("like_count", 0))
        if body.get("can_hide") is False:
            record["can_hide"] = False
        record["created"] -= float(body.get("written_seconds_ago") or 0)
    delivery = _notify(app, record, "add", deliver=body.get("deliver", True) is not False)
    with s.lock:
        return {"comment": _view(record), "delivery": delivery}


def c_redeliver(app, comment_id):
    """Meta retrying the delivery of a comment's creation: the payload it
    first made, sent again now (its entry time the new send time)."""
    s = app.store
    with s.lock:
        record = next((c for c in s.comments if c["id"] == comment_id), None)
        if record is None:
            raise fg.ControlError("no comment %r" % comment_id, 404)
        first = record.get("add_delivery")
        if first is None:
            raise fg.ControlError("comment %s had no delivery to retry" % comment_id, 409)
        delivery = json.loads(json.dumps(first))
        delivery["entry"][0]["time"] = int(s.now())
    return {"delivery": _send(app, delivery)}


def c_list_comments(app, params, body):
    with app.store.lock:
        items = [_view(c) for c in app.store.comments
                 if (not params.get("post_id") or c.get("post_id") == params["post_id"])
                 and (not params.get("media_id") or c.get("media_id") == params["media_id"])
                 and (not params.get("account") or c["account"] == params["account"])]
    return {"data": items, "total": len(items)}


def c_comment_verb(app, comment_id, verb, body):
    s = app.store
    with s.lock:
        record = next((c for c in s.comments if c["id"] == comment_id), None)
        if record is None:
            raise fg.ControlError("no comment %r" % comment_id, 404)
        if record["deleted"]:
            raise fg.ControlError("comment %s is deleted" % comment_id, 409)
        if verb == "edited":
            if not isinstance(body.get("message"), str):
                raise fg.ControlError("message must be a string")
            record["message"] = body["message"]
        elif verb == "remove":
            record["deleted"] = True
            s.objects.pop(record["id"], None)
        else:
            record["hidden"] = verb == "hide"
    delivery = _notify(app, record, verb, deliver=body.get("deliver", True) is not False)
    with s.lock:
        return {"comment": _view(record), "delivery": delivery}


def c_set_webhooks(app, params, body):
    url, secret = body.get("callback_url"), body.get("app_secret")
    if not isinstance(url, str) or not re.match(r"^https?://", url):
        raise fg.ControlError("callback_url must be an http(s) URL")
    if not isinstance(secret, str) or not secret:
        raise fg.ControlError("app_secret must be a non-empty string")
    with app.store.lock:
        app.store.webhook = {"callback_url": url, "app_secret": secret}
    return {"callback_url": url}


def c_get_webhooks(app, params, body):
    with app.store.lock:
        return {"callback_url": app.store.webhook["callback_url"],
                "deliveries": [dict(d) for d in app.store.deliveries]}


VERBS = {"edit": "edited", "remove": "remove", "hide": "hide", "unhide": "unhide"}


class _ControlTable(dict):
    """fake_graph's CONTROL, which also answers POST comments/{id}/{verb}."""

    def get(self, key, default=None):
        found = dict.get(self, key)
        if found is not None:
            return found
        method, path = key
        m = re.fullmatch(r"comments/(\d+(?:_\d+)?)/(edit|remove|hide|unhide|redeliver)", path)
        if method == "POST" and m and m.group(2) == "redeliver":
            comment_id = m.group(1)
            return lambda app, params, body: c_redeliver(app, comment_id)
        if method == "POST" and m:
            comment_id, verb = m.group(1), VERBS[m.group(2)]
            return lambda app, params, body: c_comment_verb(app, comment_id, verb, body)
        return default


# ---------------------------------------------------------------- install

def install(module):
    """Registers comments into a fake_graph module (once per module)."""
    global fg
    if getattr(module, "_comments_installed", False):
        return
    fg = module
    module._comments_installed = True
    module.Store.reset = _reset_with_comments(module.Store.reset)
    module.DEFAULT_CONFIG.setdefault("comment_replies_embedded", 25)
    module.NODE_TYPES.update(comment="Comment", ig_comment="IGComment")
    module.PLACEHOLDER_KINDS.update(comment="comment", ig_comment="ig_comment")
    module.FIELDS["comment"] = _fb_fields()
    module.FIELDS["ig_comment"] = _ig_fields()
    module.FIELDS["ig_media"]["comments_count"] = lambda app, m: len(_comments_of(app, "media_id", m["id"], False))
    module.DEFAULT_FIELDS.update(comment=["created_time", "from", "message", "id"],
                                 ig_comment=["timestamp", "text", "id"])
    routes = [
        ("post", "comments", "GET", list_post_comments),
        ("post", "comments", "POST", comment_on_post),
        ("comment", None, "GET", get_comment),
        ("comment", "comments", "GET", list_replies),
        ("comment", "comments", "POST", reply),
        ("comment", None, "POST", update_comment),
        ("comment", None, "DELETE", delete_comment),
        ("ig_media", "comments", "GET", list_media_comments),
        ("ig_comment", None, "GET", get_comment),
        ("ig_comment", "replies", "GET", list_replies),
        ("ig_comment", "replies", "POST", reply),
        ("ig_comment", None, "POST", update_comment),
        ("ig_comment", None, "DELETE", delete_comment),
    ]
    for kind, edge, method, fn in routes:
        module.route(kind, edge, method)(fn)
    module.CONTROL = _ControlTable(module.CONTROL)
    for method, path, fn in [("POST", "webhooks", c_set_webhooks), ("GET", "webhooks", c_get_webhooks),
                             ("POST", "comments", c_create_comment), ("GET", "comments", c_list_comments)]:
        module.control(method, path)(fn)


if __name__ == "__main__":
    sys.exit("fake_graph_comments is part of fake_graph.py; run that instead")

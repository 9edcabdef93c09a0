"""Checks recorded sgw answers against the OpenAPI document.

    /usr/bin/python3 spec/support/openapi_check.py lib/openapi.json RECORDS.jsonl

RECORDS.jsonl holds one answer per line, as spec/support/stack.lua records
them: {"method", "path", "status", "contentType", "body"}. Which answers are
checked is a rule, not a list:

  - a path that matches a path template of the document is an operation of
    the public API: its status must be documented (exactly, as "4XX"/"5XX", or
    as "default"), its media type must be one of that response's, and a JSON
    body must validate (JSON Schema 2020-12, $ref into the document);
  - any other path under /api/v1/ or /oauth/, or a method a documented path
    does not have, must be answered with an error (404, 405, or 429 when it
    comes first) whose problem validates against components/schemas/Problem;
  - everything else (the workspace's pages, assets) is not API and not checked.

Prints one paragraph per failure (operation, status, the failing JSON pointer,
the body) and exits 1 if there is any; exits 0 quietly otherwise.
"""
import json
import re
import sys

from jsonschema import Draft202012Validator, RefResolver
from jsonschema.exceptions import best_match

API_PREFIXES = ("/api/v1/", "/oauth/")
BODY_SHOWN = 600


def pointer(parts):
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class Document:
    def __init__(self, doc):
        self.doc = doc
        self.resolver = RefResolver.from_schema(doc)
        self.validators = {}
        # Literal paths before templated ones: /posts/{postId} must not
        # swallow a literal sibling.
        self.templates = []
        for path in doc.get("paths", {}):
            regex = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$"
            self.templates.append((path.count("{"), path, re.compile(regex)))
        self.templates.sort()

    def deref(self, node):
        while isinstance(node, dict) and "$ref" in node:
            _, node = self.resolver.resolve(node["$ref"])
        return node

    def template(self, path):
        for _, template, regex in self.templates:
            if regex.match(path):
                return template
        return None

    def errors(self, schema, value):
        key = id(schema)
        validator = self.validators.get(key)
        if validator is None:
            validator = Draft202012Validator(
                schema, resolver=self.resolver,
                format_checker=Draft202012Validator.FORMAT_CHECKER)
            self.validators[key] = validator
        return list(validator.iter_errors(value))


def media_type(content_type):
    return (content_type or "").split(";")[0].strip().lower()


def is_json(mt):
    return mt == "application/json" or mt.endswith("+json")


def find_media(content, mt):
    if mt in content:
        return content[mt]
    major = mt.split("/")[0]
    return content.get(major + "/*") or content.get("*/*")


def find_response(responses, status):
    for key in (str(status), str(status)[0] + "XX", "default"):
        if key in responses:
            return key
    return None


def shown(body):
    body = body if len(body) <= BODY_SHOWN else body[:BODY_SHOWN] + "...(%d bytes)" % len(body)
    return body


def discriminated_branch(err):
    """The index of the oneOf branch that err's instance names by its
    discriminator property, or None."""
    schema, instance = err.schema, err.instance
    disc = schema.get("discriminator") if isinstance(schema, dict) else None
    if not disc or not isinstance(instance, dict) or err.validator not in ("oneOf", "anyOf"):
        return None
    target = disc.get("mapping", {}).get(instance.get(disc["propertyName"]))
    for i, branch in enumerate(schema[err.validator]):
        if branch.get("$ref") == target:
            return i
    return None


def check_body(doc, schema, rec, where):
    try:
        value = json.loads(rec["body"])
    except ValueError as e:
        return ["%s: the body is not JSON (%s)" % (where, e)]
    errors = doc.errors(schema, value)
    if not errors:
        return []
    err = best_match(errors)
    # A oneOf/anyOf that nothing matched: follow the branch its discriminator
    # names, else the one closest to matching (fewest errors).
    while err.context:
        branches = {}
        for e in err.context:
            branches.setdefault(e.relative_schema_path[0], []).append(e)
        chosen = discriminated_branch(err)
        if chosen is None:
            # A branch of the wrong JSON type (null for an object) says least.
            wrong_type = lambda i: all(e.validator == "type" and list(e.absolute_path) == list(err.absolute_path) for e in branches[i])
            chosen = min(branches, key=lambda i: (wrong_type(i), len(branches[i])))
        if chosen not in branches:
            break
        err = best_match(branches[chosen])
    return ["%s: at %s (schema %s): %s" % (
        where, pointer(err.absolute_path), pointer(err.absolute_schema_path), err.message[:300])]


def check(doc, rec):
    method, path, status = rec["method"].lower(), rec["path"], rec["status"]
    path = path.split("?")[0]
    mt = media_type(rec.get("contentType"))
    template = doc.template(path)
    if template is None:
        if not path.startswith(API_PREFIXES):
            return []
        where = "%s %s (no such path) -> %s" % (method.upper(), path, status)
        if status < 400 or mt != "application/problem+json":
            return ["%s: an unknown API path must be answered with a problem (404, or 429 before it), got %s" % (
                where, mt or "no body")]
        return check_body(doc, {"$ref": "#/components/schemas/Problem"}, rec, where)

    op = doc.doc["paths"][template].get(method)
    if op is None:
        where = "%s %s (no such operation) -> %s" % (method.upper(), template, status)
        if status < 400 or mt != "application/problem+json":
            return ["%s: a method the document does not have must be answered with a problem (405, or 429 before it)" % where]
        return check_body(doc, {"$ref": "#/components/schemas/Problem"}, rec, where)

    where = "%s %s %s -> %s" % (op.get("operationId", "?"), method.upper(), template, status)
    key = find_response(op.get("responses", {}), status)
    if key is None:
        return ["%s: status %s is not documented (documented: %s)" % (
            where, status, ", ".join(sorted(op.get("responses", {}))))]
    response = doc.deref(op["responses"][key])
    content = response.get("content")
    if not content:
        if rec["body"] != "":
            return ["%s: the document promises no body, got %s" % (where, mt or "a body")]
        return []
    if rec["body"] == "" and not mt:
        return ["%s: the document promises a body (%s), got none" % (where, ", ".join(content))]
    media = find_media(content, mt)
    if media is None:
        return ["%s: media type %r is not documented (documented: %s)" % (
            where, mt, ", ".join(content))]
    schema = media.get("schema")
    if schema is None or not is_json(mt):
        return []
    return check_body(doc, schema, rec, where)


def main():
    with open(sys.argv[1]) as f:
        doc = Document(json.load(f))
    failures, seen = [], set()
    with open(sys.argv[2], encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            for message in check(doc, rec):
                # One report per distinct problem (operation, status, pointer,
                # schema): a loop of similar answers would only repeat it.
                key = message.split("): ")[0] if " (schema " in message else message
                if key in seen:
                    continue
                seen.add(key)
                failures.append("%s\n    record %d, body: %s" % (message, n, shown(rec["body"])))
    if failures:
        print("%d answer(s) disagree with lib/openapi.json:\n%s" % (len(failures), "\n".join(failures)))
        sys.exit(1)


if __name__ == "__main__":
    main()

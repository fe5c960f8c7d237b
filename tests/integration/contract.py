"""Checks real hookwheel answers against openapi.yaml (the API contract).

    from contract import assert_matches_contract
    status, headers, body = hookwheel.request("GET", f"/timers/{tid}")
    assert_matches_contract("GET", "/timers/{id}", status, headers, body)

assert_matches_contract(method, path_template, status, headers, body) raises
AssertionError naming every difference between the answer and the response
openapi.yaml documents for that path, method and status:
- the status must be documented for the operation (a 405 for a method the
  path does not define is looked up under the path's other operations, which
  document it);
- every header the response declares `required` must be there, and every
  declared header that is there must match its schema (`Retry-After: 1` is
  read as the integer 1);
- the Content-Type (without parameters) must be one of the documented media
  types, and the body must match that media type's schema. A response without
  `content` must have an empty body.

Schemas are validated with jsonschema's Draft202012Validator (OpenAPI 3.1
schemas are JSON Schema 2020-12), every `$ref` resolved inside openapi.yaml.
Formats are checked with this module's own checkers (date-time, uri,
uri-reference, int64), so the result does not depend on which optional format
packages are installed.

Strict by default: an object schema that lists `properties` and says nothing
about other members is closed for the check (`unevaluatedProperties: false`),
so a member the code sends but the contract does not name fails too. The
document itself stays open for clients; only the check is strict.

Contract(doc) checks against another document, e.g. a deliberately broken
copy (tests/integration/test_contract.py proves the check fails then)."""

import copy
import functools
import json
import re
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from jsonschema import Draft202012Validator, FormatChecker

REPO_ROOT = Path(__file__).resolve().parents[2]
OPENAPI_PATH = REPO_ROOT / "openapi.yaml"
# The document's base URI for $ref resolution; never fetched.
BASE_URI = "https://hookwheel.invalid/openapi.yaml"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def load_openapi(path=OPENAPI_PATH):
    """openapi.yaml parsed (a fresh copy each call: callers may change it)."""
    return copy.deepcopy(_load_cached(str(path)))


@functools.lru_cache(maxsize=4)
def _load_cached(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


# --------------------------------------------------------------------------
# formats


_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
                      r"([Zz]|[+-](\d{2}):(\d{2}))$")


def _format_checker():
    checker = FormatChecker(formats=())

    @checker.checks("date-time", raises=ValueError)
    def date_time(value):
        if not isinstance(value, str):
            return True
        m = _RFC3339.match(value)
        if not m:
            raise ValueError(f"{value!r} is not an RFC 3339 date-time")
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        datetime(year, month, day)  # ValueError for 2026-02-30
        off_h, off_m = int(m.group(9) or 0), int(m.group(10) or 0)
        if hour > 23 or minute > 59 or second > 60 or off_h > 23 or off_m > 59:
            raise ValueError(f"{value!r} is not an RFC 3339 date-time")
        return True

    @checker.checks("uri", raises=ValueError)
    def uri(value):
        if not isinstance(value, str):
            return True
        parts = urlsplit(value)
        if not parts.scheme or re.search(r"[\s\x00-\x1f]", value):
            raise ValueError(f"{value!r} is not an absolute URI")
        return True

    @checker.checks("uri-reference", raises=ValueError)
    def uri_reference(value):
        if isinstance(value, str) and re.search(r"[\s\x00-\x1f]", value):
            raise ValueError(f"{value!r} is not a URI reference")
        return True

    @checker.checks("int64", raises=ValueError)
    def int64(value):
        if isinstance(value, int) and not -2**63 <= value < 2**63:
            raise ValueError(f"{value} does not fit in int64")
        return True

    return checker


FORMAT_CHECKER = _format_checker()


# --------------------------------------------------------------------------
# strict mode


_CLOSERS = ("additionalProperties", "unevaluatedProperties", "patternProperties")


def _close_schema(node):
    """Closes object schemas that list properties, recursively through
    properties, items and $defs (not through allOf/anyOf/oneOf/not/if, where
    closing a branch would change what the whole accepts)."""
    if not isinstance(node, dict):
        return
    if "properties" in node and not any(k in node for k in _CLOSERS):
        node["unevaluatedProperties"] = False
    for sub in (node.get("properties") or {}).values():
        _close_schema(sub)
    for key in ("items", "additionalProperties"):
        _close_schema(node.get(key))
    for sub in node.get("prefixItems") or []:
        _close_schema(sub)
    for sub in (node.get("$defs") or {}).values():
        _close_schema(sub)


def _strict_copy(doc):
    doc = copy.deepcopy(doc)
    components = doc.get("components") or {}
    for schema in (components.get("schemas") or {}).values():
        _close_schema(schema)
    responses = list((components.get("responses") or {}).values())
    for item in (doc.get("paths") or {}).values():
        for method in METHODS:
            op = item.get(method) if isinstance(item, dict) else None
            if isinstance(op, dict):
                responses.extend((op.get("responses") or {}).values())
    for resp in responses:
        for media in ((resp or {}).get("content") or {}).values():
            _close_schema((media or {}).get("schema"))
    return doc


# --------------------------------------------------------------------------
# the contract


def _pointer_token(key):
    return str(key).replace("~", "~0").replace("/", "~1")


def media_type(value):
    """'application/json; charset=utf-8' -> 'application/json'."""
    if value is None:
        return None
    return value.split(";", 1)[0].strip().lower()


def _header_map(headers):
    if headers is None:
        return {}
    items = headers.items() if hasattr(headers, "items") else headers
    out = {}
    for name, value in items:
        out.setdefault(name.lower(), value)
    return out


def _header_value(raw, schema):
    """A header's text as the type its schema names (integers for integer)."""
    types = schema.get("type") if isinstance(schema, dict) else None
    types = types if isinstance(types, list) else [types]
    text = raw.strip()
    if "integer" in types and re.fullmatch(r"-?\d+", text):
        return int(text)
    if "number" in types:
        try:
            return float(text)
        except ValueError:
            pass
    return text


class Contract:
    """The responses of one OpenAPI document, checkable against answers."""

    def __init__(self, doc=None, strict=True):
        self.doc = load_openapi() if doc is None else doc
        self.checked_doc = _strict_copy(self.doc) if strict else copy.deepcopy(self.doc)
        self._make_validator = self._validator_factory()

    # -- $ref resolution

    def _validator_factory(self):
        doc = self.checked_doc
        try:
            from referencing import Registry
            from referencing.jsonschema import DRAFT202012
        except ImportError:  # jsonschema < 4.18 (Debian bookworm: 4.10)
            from jsonschema import RefResolver

            def make(pointer):
                resolver = RefResolver(BASE_URI, doc, store={BASE_URI: doc})
                return Draft202012Validator({"$ref": f"{BASE_URI}#{pointer}"},
                                            resolver=resolver, format_checker=FORMAT_CHECKER)
            return make
        registry = Registry().with_resource(BASE_URI, DRAFT202012.create_resource(doc))

        def make(pointer):
            return Draft202012Validator({"$ref": f"{BASE_URI}#{pointer}"}, registry=registry,
                                        format_checker=FORMAT_CHECKER)
        return make

    def _follow(self, node, pointer):
        """Follows $ref (local only) until a node without one; returns the
        node and its JSON pointer."""
        seen = set()
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/") or ref in seen:
                raise AssertionError(f"openapi.yaml: unsupported or circular $ref {ref!r}")
            seen.add(ref)
            pointer = ref[1:]
            node = self.checked_doc
            for token in pointer.split("/")[1:]:
                node = node[token.replace("~1", "/").replace("~0", "~")]
        return node, pointer

    # -- lookups

    def operations(self):
        """[(METHOD, path template)] of every operation the document has."""
        ops = []
        for path, item in (self.checked_doc.get("paths") or {}).items():
            for method in METHODS:
                if isinstance(item, dict) and method in item:
                    ops.append((method.upper(), path))
        return ops

    def statuses(self, method, path_template):
        """The documented status keys of an operation ('201', '4XX', ...)."""
        op = (self.checked_doc["paths"].get(path_template) or {}).get(method.lower()) or {}
        return sorted((op.get("responses") or {}).keys())

    def response(self, method, path_template, status):
        """(response object, its JSON pointer) documented for the call."""
        paths = self.checked_doc.get("paths") or {}
        if path_template not in paths:
            raise AssertionError(f"openapi.yaml documents no path {path_template!r} "
                                 f"(paths: {sorted(paths)})")
        item = paths[path_template]
        base = "/paths/" + _pointer_token(path_template)
        candidates = []
        if method.lower() in item:
            candidates.append(method.lower())
        elif int(status) == 405:
            # A method the path does not define: every defined operation
            # documents the 405 it gets.
            candidates.extend(m for m in METHODS if m in item)
        else:
            raise AssertionError(f"openapi.yaml documents no {method.upper()} {path_template} "
                                 f"(it has {[m.upper() for m in METHODS if m in item]}), "
                                 f"and the answer was {status}, not 405")
        keys = (str(status), f"{str(status)[0]}XX", "default")
        for m in candidates:
            responses = item[m].get("responses") or {}
            for key in keys:
                if key in responses:
                    pointer = f"{base}/{m}/responses/{_pointer_token(key)}"
                    return self._follow(responses[key], pointer)
        documented = sorted((item[candidates[0]].get("responses") or {}).keys())
        raise AssertionError(f"{method.upper()} {path_template} answered {status}, which "
                             f"openapi.yaml does not document (documented: {documented})")

    # -- the check

    def check(self, method, path_template, status, headers, body):
        """Raises AssertionError listing every way the answer differs from
        the contract; returns None when it matches."""
        where = f"{method.upper()} {path_template} -> {status}"
        resp, pointer = self.response(method, path_template, status)
        problems = []
        hdrs = _header_map(headers)
        problems += self._check_headers(resp, pointer, hdrs)
        problems += self._check_body(resp, pointer, hdrs, body)
        if problems:
            raise AssertionError(f"{where} does not match openapi.yaml:\n  " +
                                 "\n  ".join(problems) + f"\n  body: {body!r:.600}")

    def _check_headers(self, resp, pointer, hdrs):
        problems = []
        for name, spec in (resp.get("headers") or {}).items():
            hpointer = f"{pointer}/headers/{_pointer_token(name)}"
            spec, hpointer = self._follow(spec, hpointer)
            raw = hdrs.get(name.lower())
            if raw is None:
                if spec.get("required"):
                    problems.append(f"header {name} is required but missing")
                continue
            schema = spec.get("schema")
            if schema is None:
                continue
            schema_node, spointer = self._follow(schema, hpointer + "/schema")
            value = _header_value(raw, schema_node)
            for err in self._make_validator(spointer).iter_errors(value):
                problems.append(f"header {name}: {raw!r}: {err.message}")
        return problems

    def _check_body(self, resp, pointer, hdrs, body):
        content = resp.get("content") or {}
        if not content:
            if body not in (None, b"", ""):
                return [f"no body is documented, got {body!r:.200}"]
            return []
        ctype = media_type(hdrs.get("content-type"))
        if ctype not in content:
            return [f"Content-Type {hdrs.get('content-type')!r} is not documented "
                    f"(documented: {sorted(content)})"]
        media = content[ctype] or {}
        if "schema" not in media:
            return []
        if isinstance(body, (bytes, bytearray, str)):
            if not (ctype.endswith("/json") or ctype.endswith("+json")):
                return []  # a text body: nothing more to check here
            try:
                body = json.loads(body)
            except ValueError as e:
                return [f"the {ctype} body is not JSON: {e}"]
        spointer = f"{pointer}/content/{_pointer_token(ctype)}/schema"
        _, spointer = self._follow(media["schema"], spointer)
        validator = self._make_validator(spointer)
        return [f"body{''.join(f'[{p!r}]' for p in err.absolute_path)}: {err.message}"
                for err in sorted(validator.iter_errors(body), key=lambda e: list(e.path))]


@functools.lru_cache(maxsize=1)
def default_contract():
    """The Contract of the repository's openapi.yaml (strict)."""
    return Contract()


def assert_matches_contract(method, path_template, status, headers, body, contract=None):
    """Raises AssertionError unless the answer (status, headers, body) is what
    openapi.yaml documents for method + path_template (e.g. "/timers/{id}").
    body may be the parsed JSON, bytes or str. contract: a Contract to check
    against instead of openapi.yaml."""
    (contract or default_contract()).check(method, path_template, status, headers, body)

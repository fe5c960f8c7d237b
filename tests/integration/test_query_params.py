"""Query parameters: each operation takes the ones openapi.yaml lists for it,
each at most once. Another, or one given twice, is answered 400 naming it
(a typo such as `stat=failed` would otherwise list every timer, and of two
labels only the first would filter). The probes and the dashboard's files
take any."""

import re

from contract import assert_matches_contract, load_openapi

OPEN = {"/healthz", "/readyz", "/ui", "/ui/", "/ui/{file}"}


def operations():
    doc = load_openapi()
    shared = doc.get("components", {}).get("parameters", {})
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            names = []
            for p in op.get("parameters", []) + item.get("parameters", []):
                if "$ref" in p:
                    p = shared[p["$ref"].rsplit("/", 1)[-1]]
                if p.get("in") == "query":
                    names.append(p["name"])
            yield method.upper(), path, names


def concrete(path):
    return re.sub(r"\{[^}]+\}", "qp-x", path).replace("/ui/qp-x", "/ui/app.js")


def test_an_unknown_or_repeated_query_parameter_gets_400_naming_it(hookwheel):
    seen = 0
    for method, path, names in operations():
        url = concrete(path)
        status, headers, body = hookwheel.request(method, url + "?zz-typo=1")
        if path in OPEN:
            assert status != 400, (method, path, body)
            continue
        seen += 1
        assert status == 400, (method, path, status, body)
        assert body["field"] == "zz-typo", body
        takes = " ".join(names) if names else "none"
        assert body["detail"] == f"unknown query parameter zz-typo: this endpoint takes {takes}", body
        assert_matches_contract(method, path, status, headers, body)
        for name in names:
            status, _, body = hookwheel.request(method, f"{url}?{name}=1&{name}=2")
            assert status == 400 and body["field"] == name, (method, path, name, body)
            assert body["detail"] == f"the query parameter {name} is given twice", body
            # once is not refused for its name (the value may be wrong for other reasons)
            status, _, body = hookwheel.request(method, f"{url}?{name}=1")
            detail = body.get("detail", "") if isinstance(body, dict) else ""
            assert not detail.startswith(("unknown query parameter", "the query parameter")), (
                method, path, name, body)
    assert seen >= 25, seen
    # the refused request changed nothing: a create with a typo stored no timer
    status, _, body = hookwheel.request("POST", "/timers?dry_run=1", json_body={
        "id": "qp-created", "url": "http://127.0.0.1:9/", "delay_ms": 60000})
    assert status == 400 and body["field"] == "dry_run", body
    assert hookwheel.request("GET", "/timers/qp-created")[0] == 404


def test_a_label_given_twice_is_refused_not_half_applied(hookwheel):
    status, _, body = hookwheel.request("GET", "/timers?label=team:a&label=team:b")
    assert status == 400 and body["field"] == "label", body


def test_a_number_in_a_query_or_cursor_is_plain_digits(hookwheel):
    """' 5', '+5' and '-1' were read by strtoul as 5, 5 and a huge number in
    some parameters (GET /timers' limit, the preview's count and from, a
    selector's cursor) and refused in others: each is refused everywhere,
    as the documented form is digits."""
    for bad in ("%205", "%2B5", "5%20", "-1", "0x5", "05", ""):
        for path, field in (("/timers?state=scheduled&limit=", "limit"), ("/leases?limit=", "limit"),
                            ("/stats?minutes=", "minutes"),
                            ("/schedules/preview?cron=0+9+*+*+*&count=", "count"),
                            ("/schedules/preview?cron=0+9+*+*+*&from=", "from")):
            status, _, body = hookwheel.request("GET", path + bad)
            assert status == 400 and body["field"] == field, (path + bad, status, body)
        # the same digits alone are taken
    for path in ("/timers?state=scheduled&limit=5", "/leases?limit=5", "/stats?minutes=5",
                 "/schedules/preview?cron=0+9+*+*+*&count=5", "/schedules/preview?cron=0+9+*+*+*&from=5"):
        status, _, body = hookwheel.request("GET", path)
        assert status == 200, (path, body)
    for cursor in ("+0.0.", " 0.0.", "0.+0.", "0. 0.", "-0.0."):
        status, _, body = hookwheel.request("POST", "/timers/cancel",
                                            json_body={"labels": {"team": "x"}, "dry_run": True, "cursor": cursor})
        assert status == 400 and body["field"] == "cursor", (cursor, body)
    status, _, body = hookwheel.request("POST", "/timers/cancel",
                                        json_body={"labels": {"team": "x"}, "dry_run": True, "cursor": "0.0."})
    assert status == 200, body

"""Changes a page of another site makes a browser send are refused (403).

Fire, pause, resume, retry and the dead-letter replay and purge take no body,
so without API tokens any page its visitor's browser loads could send them
as a plain form (no preflight). Browsers say where a request comes from in
Sec-Fetch-Site; the first tests send the header as a browser would, the last
lets a real headless Chromium submit such a form from another site."""

import time

from conftest import Reply, assert_created, scaled, wait_until
from test_ui import browser, browser_only  # noqa: F401 (a fixture, and its mark)

FAR = 3_600_000


def create(hw, receiver, timer_id):
    status, headers, body = hw.request("POST", "/timers", json_body={
        "id": timer_id, "url": receiver.url(f"/hook/{timer_id}"), "delay_ms": FAR})
    assert_created(status, headers, body)


def state(hw, timer_id):
    status, _, body = hw.request("GET", f"/timers/{timer_id}")
    assert status == 200, body
    return body["state"]


def test_changes_from_another_site_are_refused_and_change_nothing(hookwheel, receiver):
    create(hookwheel, receiver, "cs-1")
    refused = ({"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
               {"Sec-Fetch-Site": "CROSS-SITE"}, {"Origin": "null"})
    for headers in refused:
        for method, path in (("POST", "/timers/cs-1/fire"), ("POST", "/timers/cs-1/pause"),
                             ("POST", "/dead-letters/purge"), ("POST", "/dead-letters/replay"),
                             ("DELETE", "/timers/cs-1")):
            status, rh, body = hookwheel.request(method, path, headers=headers)
            assert status == 403, (headers, method, path, status, body)
            assert rh["Content-Type"].startswith("application/problem+json"), dict(rh)
            assert "another site" in body["detail"], body
        # a create with a JSON body is refused the same way
        status, _, body = hookwheel.request("POST", "/timers", headers=headers, json_body={
            "id": "cs-x", "url": receiver.url("/hook/cs-x"), "delay_ms": FAR})
        assert status == 403, body
    assert state(hookwheel, "cs-1") == "scheduled"
    assert hookwheel.request("GET", "/timers/cs-x")[0] == 404
    # reads are not changes; the dashboard's own requests and clients that
    # are not browsers go through
    status, _, body = hookwheel.request("GET", "/timers/cs-1", headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 200, body
    status, _, body = hookwheel.request("POST", "/timers/cs-1/pause", headers={"Sec-Fetch-Site": "same-origin"})
    assert status == 200, body
    status, _, body = hookwheel.request("POST", "/timers/cs-1/resume",
                                        headers={"Sec-Fetch-Site": "none", "Origin": "http://127.0.0.1"})
    assert status == 200, body
    status, _, body = hookwheel.request("DELETE", "/timers/cs-1")
    assert status == 200, body


@browser_only
def test_a_form_on_another_sites_page_cannot_fire_a_timer(hookwheel, receiver, browser):  # noqa: F811
    create(hookwheel, receiver, "cs-2")
    receiver.default("/hook/cs-2", Reply(204))
    # The page is on http://localhost:<receiver>/, the API on 127.0.0.1: two sites.
    page = (f'<!doctype html><form method="POST" action="http://127.0.0.1:{hookwheel.port}/timers/cs-2/fire">'
            '</form><script>document.forms[0].submit()</script>')
    receiver.default("/attack", Reply(200, headers={"Content-Type": "text/html"}, body=page))
    browser.get(f"http://localhost:{receiver.port}/attack")
    # the form was sent: the browser shows hookwheel's answer
    assert wait_until(lambda: "another site" in browser.page_source, scaled(10)), browser.page_source[:500]
    time.sleep(0.5)
    assert state(hookwheel, "cs-2") == "scheduled"
    assert not receiver.requests("/hook/cs-2")

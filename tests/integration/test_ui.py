"""The dashboard at /ui: api/ui.c's answers (types, ETag and 304, the
security headers, 404, HEAD, no token needed), then the page itself in a
real headless Chromium (Debian's chromium and chromium-driver, driven with
selenium) against the real binary, a real Redis and a real receiver.

The browser tests run once: not on the Redis Cluster pass nor under the
sanitizers (slow, and they test the page, not hookwheel's Redis calls).
Each writes screenshots to build/screenshots/ (docs/screenshots/ keeps a
copy for the README)."""

import hashlib
import os
import shutil
import time

import pytest

from conftest import CLUSTER_MODE, REPO_ROOT, SLOW, Reply, scaled, wait_until
from contract import assert_matches_contract

TOKEN_A = "ui-team-a-token-5d1c8e2f7a"
TOKEN_B = "ui-team-b-token-9b3a6c0e4d"
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'self'; frame-ancestors 'none'")
SHOTS = REPO_ROOT / "build" / "screenshots"
FILES = {"app.js": "text/javascript", "app.css": "text/css", "index.html": "text/html"}


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def start(tmp_path, redis, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {TOKEN_A}\nteam-b {TOKEN_B}\n")
    return hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})


# --------------------------------------------------------------------------
# api/ui.c without a browser: runs everywhere


def test_the_dashboard_files_are_served_without_a_token_with_their_types_and_security_headers(
        tmp_path, redis, hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory)
    status, headers, body = hw.request("GET", "/ui")
    assert status == 308 and headers["Location"] == "/ui/", (status, dict(headers))
    assert_matches_contract("GET", "/ui", status, headers, body)
    status, headers, page = hw.request("GET", "/ui/")
    assert status == 200, (status, page)
    assert_matches_contract("GET", "/ui/", status, headers, page)
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'<script src="app.js" defer></script>' in page
    assert page == (REPO_ROOT / "ui" / "index.html").read_bytes()
    for name, ctype in FILES.items():
        status, headers, body = hw.request("GET", f"/ui/{name}")
        assert status == 200, (name, status, body)
        assert_matches_contract("GET", "/ui/{file}", status, headers, body)
        assert body == (REPO_ROOT / "ui" / name).read_bytes(), name
        assert headers["Content-Type"] == f"{ctype}; charset=utf-8", dict(headers)
        assert headers["Content-Security-Policy"] == CSP
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "no-referrer"
        assert headers["Cache-Control"] == "no-cache"
        # a strong ETag, made from the file's bytes at build time
        assert headers["ETag"] == '"%s"' % hashlib.sha256(body).hexdigest()[:16], headers["ETag"]
    # the API itself still needs the token
    assert hw.request("GET", "/queues")[0] == 401


def test_a_matching_if_none_match_answers_304_head_has_no_body_and_unknown_files_404(
        tmp_path, redis, hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory)
    status, headers, body = hw.request("GET", "/ui/app.js")
    etag = headers["ETag"]
    for inm in (etag, f'"nope", {etag}', f"W/{etag}", "*"):
        status, h304, body = hw.request("GET", "/ui/app.js", headers={"If-None-Match": inm})
        assert status == 304 and body in (b"", None), (inm, status, body)
        assert h304["ETag"] == etag and h304["Content-Security-Policy"] == CSP, dict(h304)
        assert_matches_contract("GET", "/ui/{file}", status, h304, body)
    status, _, body = hw.request("GET", "/ui/app.js", headers={"If-None-Match": '"0000000000000000"'})
    assert status == 200 and body, status
    status, _, body = hw.request("GET", "/ui/", headers={"If-None-Match": etag})  # another file's
    assert status == 200 and body, status
    status, headers, body = hw.request("HEAD", "/ui/app.css")
    assert status == 200 and body in (b"", None), (status, body)
    assert int(headers["Content-Length"]) == (REPO_ROOT / "ui" / "app.css").stat().st_size
    assert headers["Content-Type"] == "text/css; charset=utf-8"
    status, headers, _ = hw.request("HEAD", "/ui")
    assert status == 308 and headers["Location"] == "/ui/"
    for path in ("/ui/nope.js", "/ui/..%2Fopenapi.yaml", "/ui/app.js/x", "/ui/index.html.bak"):
        status, headers, body = hw.request("GET", path)
        assert status == 404, (path, status, body)
        assert headers["Content-Type"] == "application/problem+json" and body["status"] == 404, body
    status, _, body = hw.request("GET", "/ui/nope.js")
    assert_matches_contract("GET", "/ui/{file}", status, _, body)
    status, headers, body = hw.request("POST", "/ui/app.js", raw_body=b"x")
    assert status == 405 and headers["Allow"] == "GET, HEAD", (status, dict(headers))


# --------------------------------------------------------------------------
# the page in a browser

browser_only = pytest.mark.skipif(
    CLUSTER_MODE or SLOW, reason="the dashboard's browser tests run once, on one Redis, "
                                 "without sanitizers")


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver_bin = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (os.path.exists(chromium) and os.path.exists(driver_bin)):
        pytest.fail("Debian's chromium and chromium-driver are needed (make deps)", pytrace=False)
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,800", "--hide-scrollbars", "--no-first-run",
                "--disable-extensions", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
    driver.set_page_load_timeout(scaled(20))
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The dashboard in the browser: small waits and finds by CSS."""

    def __init__(self, driver, hw):
        from selenium.webdriver.common.by import By
        self.d, self.hw, self.By = driver, hw, By
        self.base = f"http://127.0.0.1:{hw.port}/ui/"

    def open(self, fragment=""):
        self.d.get(self.base + fragment)

    def find(self, css):
        return self.d.find_element(self.By.CSS_SELECTOR, css)

    def finds(self, css):
        return self.d.find_elements(self.By.CSS_SELECTOR, css)

    def text(self, css):
        found = self.finds(css)
        return found[0].text if found else None

    def wait(self, fn, what, timeout=10):
        def attempt():
            try:
                return fn()
            except Exception:  # the element is not there yet, or was re-drawn
                return None
        got = wait_until(attempt, scaled(timeout), interval=0.1)
        assert got, f"timed out waiting for {what}; alert: {self.text('#alert')!r}"
        return got

    def wait_text(self, css, want, timeout=10):
        return self.wait(lambda: want in (self.find(css).text or ""), f"{css} to show {want!r}", timeout)

    def visible(self, css):
        found = self.finds(css)
        return bool(found) and found[0].is_displayed()

    def login(self, token):
        self.open()
        self.wait(lambda: self.visible("#token"), "the log-in form")
        field = self.find("#token")
        field.clear()
        field.send_keys(token)
        self.find("#login-form button[type=submit]").click()

    def confirm(self, fields=None):
        self.wait(lambda: self.visible("#confirm"), "the confirmation dialog")
        for name, value in (fields or {}).items():
            box = self.find(f"#confirm-field-{name}")
            box.clear()
            box.send_keys(str(value))
        self.find("#confirm-ok").click()
        self.wait(lambda: not self.visible("#confirm"), "the dialog to close")

    def cell(self, queue, col):
        return self.text(f'#queues-table tr[data-queue="{queue}"] td[data-col="{col}"]')

    def shot(self, name):
        """The whole page, beyond the window's height, as build/screenshots/<name>.png."""
        import base64
        SHOTS.mkdir(parents=True, exist_ok=True)
        time.sleep(0.3)  # let the last redraw settle
        size = self.d.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        width = self.d.execute_script("return window.innerWidth")
        png = self.d.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": size["height"], "scale": 1}})
        (SHOTS / f"{name}.png").write_bytes(base64.b64decode(png["data"]))

    def console_errors(self):
        """Script errors and refused loads (CSP); not the answers of the API
        the page expects (a 404 of /stats from an older server)."""
        return [e for e in self.d.get_log("browser")
                if e.get("level") == "SEVERE" and e.get("source") != "network"]


def api_get(hw, path, token=TOKEN_A):
    return hw.request("GET", path, headers=bearer(token))


@browser_only
def test_logging_in_shows_the_queues_whose_counts_follow_the_timers_created(
        tmp_path, redis, hookwheel_factory, receiver, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    page = Page(browser, hw)
    page.open()
    assert page.wait(lambda: page.visible("#view-login"), "the log-in prompt")
    assert "API token" in page.text("#view-login")
    assert browser.execute_script("return sessionStorage.length") == 0
    page.login(TOKEN_A)
    page.wait(lambda: page.visible("#view-overview"), "the overview")
    assert browser.execute_script("return sessionStorage.getItem('hookwheel.token')") == TOKEN_A
    assert browser.execute_script("return localStorage.length") == 0
    assert browser.get_cookies() == []
    for i in range(3):
        status, _, body = hw.create({"id": f"ov-{i}", "url": receiver.url("/ov"), "delay_ms": 3600000,
                                     "queue": "billing"}, headers=bearer(TOKEN_A))
        assert status == 201, body
    page.wait(lambda: page.cell("billing", "scheduled") == "3", "billing's 3 scheduled timers")
    for i in range(2):
        status, _, body = hw.create({"id": f"ov-r-{i}", "url": receiver.url("/ov"), "delay_ms": 3600000,
                                     "queue": "reports"}, headers=bearer(TOKEN_A))
        assert status == 201, body
    status, _, body = hw.create({"id": "ov-3", "url": receiver.url("/ov"), "delay_ms": 3600000,
                                 "queue": "billing"}, headers=bearer(TOKEN_A))
    assert status == 201, body
    page.wait(lambda: page.cell("billing", "scheduled") == "4", "billing's count to follow to 4")
    page.wait(lambda: page.cell("reports", "scheduled") == "2", "reports' 2 scheduled timers")
    # the bar chart is drawn from /queues: a bar per queue and state, sized by the count
    bars = page.finds('#chart-queues svg rect[data-queue="billing"][data-state="scheduled"]')
    assert len(bars) == 1 and bars[0].get_attribute("data-value") == "4"
    assert float(bars[0].get_attribute("height")) > 0
    assert len(page.finds("#chart-queues svg rect[data-state]")) == 8
    # the last hour from GET /stats, drawn as line charts
    receiver.default("/ov-fail", 500)
    for i in range(3):
        assert hw.create({"id": f"ov-now-{i}", "url": receiver.url("/ov-now"), "delay_ms": 0,
                          "queue": "billing"}, headers=bearer(TOKEN_A))[0] == 201
    assert hw.create({"id": "ov-fail", "url": receiver.url("/ov-fail"), "delay_ms": 0,
                      "queue": "billing", "retry": {"max_attempts": 1}},
                     headers=bearer(TOKEN_A))[0] == 201

    def plotted(css):
        """The sum of a series' points, read from their tooltips ("<start>: <n> ...")."""
        titles = browser.execute_script(
            f"return [...document.querySelectorAll('{css} title')].map(t => t.textContent)")
        return sum(float(t.split(": ", 1)[1].split()[0]) for t in titles)
    page.wait(lambda: plotted("#chart-deliveries circle.series-delivered") >= 3 and
              plotted("#chart-deliveries circle.series-failed") >= 1,
              "the deliveries and the failure drawn from GET /stats", timeout=20)
    assert len(page.finds("#chart-deliveries svg circle.series-delivered")) == 60
    assert page.finds("#chart-deliveries svg path.series-delivered")
    assert page.finds("#chart-lateness svg circle.series-p50"), "no lateness drawn"
    assert len(page.finds("#chart-deliveries svg line.grid")) == 5
    assert not page.visible("#stats-note")
    page.wait(lambda: page.cell("billing", "scheduled") == "4", "billing back at 4")
    page.shot("overview")
    browser.set_window_size(390, 844)
    page.wait(lambda: browser.execute_script(
        "return document.querySelector('#chart-queues svg').viewBox.baseVal.width") <= 390,
              "the bar chart drawn again to the phone's width")
    page.shot("overview-phone")
    # nothing wider than the phone's screen but the tables' own scroll boxes
    width = browser.execute_script("return document.documentElement.scrollWidth")
    assert width <= 390 + 1, width
    browser.set_window_size(1280, 800)
    # every control has a name
    unnamed = browser.execute_script("""
        return [...document.querySelectorAll('button, input, select, a')].filter(e => {
          const id = e.id && document.querySelector('label[for="' + e.id + '"]');
          return !(e.getAttribute('aria-label') || id || e.textContent.trim());
        }).map(e => e.outerHTML);""")
    assert unnamed == [], unnamed
    # log out forgets the token
    page.find("#logout").click()
    page.wait(lambda: page.visible("#view-login"), "the log-in form after log-out")
    assert browser.execute_script("return sessionStorage.getItem('hookwheel.token')") is None
    assert page.console_errors() == [], page.console_errors()


@browser_only
def test_a_wrong_token_shows_an_error_and_no_data(tmp_path, redis, hookwheel_factory, receiver,
                                                 browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    page = Page(browser, hw)
    page.login("not-a-valid-token-at-all-0000")
    page.wait(lambda: page.visible("#login-error"), "the log-in error")
    assert "401" in page.text("#login-error") and "refused" in page.text("#login-error")
    assert page.visible("#view-login") and not page.visible("#view-overview")
    assert browser.execute_script("return sessionStorage.getItem('hookwheel.token')") is None
    # a token that stops working (hookwheel restarted with other tokens) sends the page back
    browser.execute_script("sessionStorage.setItem('hookwheel.token', 'stale-token-000000000000')")
    page.open("#/timers")
    page.wait(lambda: page.visible("#login-error"), "the error for a stale token")
    assert "401" in page.text("#login-error")


@browser_only
def test_a_failed_timer_is_found_by_id_its_attempts_read_and_retried_until_delivered(
        tmp_path, redis, hookwheel_factory, receiver, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    receiver.default("/flaky", Reply(500, body="upstream broke"))
    spec = {"id": "dead-1", "url": receiver.url("/flaky"), "delay_ms": 0, "queue": "billing",
            "retry": {"max_attempts": 1}, "labels": {"customer": "42"}}
    status, _, body = hw.create(spec, headers=bearer(TOKEN_A))
    assert status == 201, body
    assert wait_until(lambda: api_get(hw, "/timers/dead-1")[2].get("state") == "failed",
                      scaled(10), interval=0.05), api_get(hw, "/timers/dead-1")
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.wait(lambda: page.visible("#view-overview"), "the overview")
    # the failed listing
    page.find('#nav a[data-view="timers"]').click()
    page.wait(lambda: page.visible("#list-form"), "the timers view")
    from selenium.webdriver.support.ui import Select
    Select(page.find("#list-state")).select_by_visible_text("failed")
    page.find("#list-label").send_keys("customer:42")
    page.find("#list-form button[type=submit]").click()
    page.wait(lambda: page.finds('#timers-table tr[data-id="dead-1"]'), "dead-1 in the failed listing")
    assert "failed" in page.text('#timers-table tr[data-id="dead-1"]')
    assert "HTTP 500" in page.text('#timers-table tr[data-id="dead-1"]')
    page.shot("timers")
    # by id
    page.find("#find-id").send_keys("dead-1")
    page.find("#find-form button[type=submit]").click()
    page.wait_text("#timer-state", "failed")
    rows = page.finds("#attempts-table tbody tr")
    assert len(rows) == 1, [r.text for r in rows]
    assert page.text('#attempts-table td[data-col="status"]') == "500"
    assert "upstream broke" in page.text("#attempts-table tbody")
    assert hw.instance_id in page.text("#attempts-table tbody")
    assert '"customer": "42"' in page.text("#timer-spec")
    page.shot("timer-detail")
    # retry it, the receiver answering 200 now
    receiver.default("/flaky", Reply(200))
    page.find('#timer-actions button[data-action="retry"]').click()
    page.confirm()
    page.wait_text("#timer-state", "delivered", timeout=15)
    assert len(page.finds("#attempts-table tbody tr")) == 2
    assert page.text('#attempts-table td[data-col="status"]') == "200"
    assert [r.path for r in receiver.requests(timer_id="dead-1")] == ["/flaky", "/flaky"]
    # an id that does not exist says so
    page.open("#/timers/no-such-timer")
    page.wait(lambda: page.visible("#timer-missing"), "the not-found note")
    assert "No timer" in page.text("#timer-missing")


@browser_only
def test_a_queue_paused_from_the_page_holds_its_timers_until_resumed(
        tmp_path, redis, hookwheel_factory, receiver, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    status, _, body = hw.request("PUT", "/queues/slow", json_body={"parallelism": 3,
                                 "max_dispatches_per_second": 50}, headers=bearer(TOKEN_A))
    assert status == 200, body
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.wait(lambda: page.cell("slow", "parallelism") == "3", "queue slow in the table")
    page.find('#queues-table tr[data-queue="slow"] button[data-action="pause"]').click()
    page.confirm()
    page.wait(lambda: "paused" in page.cell("slow", "state"), "slow shown paused")
    status, _, q = api_get(hw, "/queues/slow")
    # the PUT kept the other controls
    assert q["paused"] is True and q["parallelism"] == 3 and q["max_dispatches_per_second"] == 50, q
    time.sleep(1.2)  # every instance applies a queue's controls within a second
    for i in range(2):
        status, _, body = hw.create({"id": f"held-{i}", "url": receiver.url("/held"), "delay_ms": 0,
                                     "queue": "slow"}, headers=bearer(TOKEN_A))
        assert status == 201, body
    page.wait(lambda: page.cell("slow", "due") == "2", "2 due timers waiting in slow", timeout=15)
    time.sleep(1.0)
    assert receiver.requests(path="/held") == [], "a paused queue's timer was delivered"
    # edit the limits: parallelism and rate, the pause kept
    page.find('#queues-table tr[data-queue="slow"] button[data-action="edit"]').click()
    page.confirm({"parallelism": 5, "rate": 7.5})
    page.wait(lambda: page.cell("slow", "parallelism") == "5", "the new parallelism")
    status, _, q = api_get(hw, "/queues/slow")
    assert q["parallelism"] == 5 and q["max_dispatches_per_second"] == 7.5 and q["paused"] is True, q
    assert receiver.requests(path="/held") == []
    page.find('#queues-table tr[data-queue="slow"] button[data-action="resume"]').click()
    page.confirm()
    assert len(receiver.wait_for(2, path="/held", timeout=scaled(10))) == 2
    page.wait(lambda: "running" in page.cell("slow", "state"), "slow shown running")
    # a cancelled confirmation changes nothing
    page.find('#queues-table tr[data-queue="slow"] button[data-action="pause"]').click()
    page.wait(lambda: page.visible("#confirm"), "the dialog")
    page.find("#confirm-cancel").click()
    time.sleep(0.5)
    assert api_get(hw, "/queues/slow")[2]["paused"] is False


@browser_only
def test_dead_letters_of_a_queue_are_replayed_from_the_page(tmp_path, redis, hookwheel_factory,
                                                           receiver, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    receiver.plan("/dl", [500, 500])  # the first attempts fail, the replays get the default 204
    for i in range(2):
        status, _, body = hw.create({"id": f"dl-{i}", "url": receiver.url("/dl"), "delay_ms": 0,
                                     "queue": "dl", "retry": {"max_attempts": 1}},
                                    headers=bearer(TOKEN_A))
        assert status == 201, body
    for i in range(2):
        assert wait_until(lambda: api_get(hw, f"/timers/dl-{i}")[2].get("state") == "failed",
                          scaled(10), interval=0.05)
    status, _, body = hw.request("PUT", "/queues/dl", json_body={}, headers=bearer(TOKEN_A))
    assert status == 200, body
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.wait(lambda: page.finds('#queues-table tr[data-queue="dl"]'), "queue dl")
    page.find('#queues-table tr[data-queue="dl"] button[data-action="replay"]').click()
    page.confirm()
    page.wait_text("#status", "2 dead letters of dl replayed")
    assert len(receiver.wait_for(4, path="/dl", timeout=scaled(10))) == 4
    for i in range(2):
        assert wait_until(lambda: api_get(hw, f"/timers/dl-{i}")[2].get("state") == "delivered",
                          scaled(10), interval=0.05)


@browser_only
def test_timer_actions_cancel_pause_resume_and_fire_ask_first(tmp_path, redis, hookwheel_factory,
                                                              receiver, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    for tid in ("act-1", "act-2"):
        status, _, body = hw.create({"id": tid, "url": receiver.url("/act"), "delay_ms": 3600000},
                                    headers=bearer(TOKEN_A))
        assert status == 201, body
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.open("#/timers/act-1")
    page.wait_text("#timer-state", "scheduled")
    page.find('#timer-actions button[data-action="pause"]').click()
    page.confirm()
    page.wait_text("#timer-state", "paused")
    page.find('#timer-actions button[data-action="resume"]').click()
    page.confirm()
    page.wait_text("#timer-state", "scheduled")
    page.find('#timer-actions button[data-action="cancel"]').click()
    page.confirm()
    page.wait_text("#timer-state", "cancelled")
    assert page.finds('#timer-actions button') == []
    page.open("#/timers/act-2")
    page.wait_text("#timer-state", "scheduled")
    page.find('#timer-actions button[data-action="fire"]').click()
    page.confirm()
    assert len(receiver.wait_for(1, path="/act", timeout=scaled(10))) == 1
    page.wait_text("#timer-state", "delivered")
    assert api_get(hw, "/timers/act-1")[2]["state"] == "cancelled"


@browser_only
def test_cancel_and_pause_of_a_recurring_timer_in_its_run_say_the_run_completes_first(
        tmp_path, redis, hookwheel_factory, receiver, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    for path in ("/slow-c", "/slow-p"):  # each timer's run lasts while the page acts
        receiver.default(path, Reply(200, delay_s=scaled(8)))
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.wait(lambda: page.visible("#nav"), "the views after logging in")
    for tid, action, then in (("run-c", "cancel", "then it is cancelled"),
                              ("run-p", "pause", "then no run follows until it is resumed or fired")):
        path = "/slow-" + action[0]
        status, _, body = hw.create({"id": tid, "url": receiver.url(path), "delay_ms": 0, "timeout_ms": 30000,
                                     "repeat": {"every_ms": 3600000}}, headers=bearer(TOKEN_A))
        assert status == 201, body
        assert receiver.wait_for(1, path=path, timeout=scaled(10)), "the run's attempt"
        page.open(f"#/timers/{tid}")
        page.wait_text("#timer-state", "firing")
        page.find(f'#timer-actions button[data-action="{action}"]').click()
        page.confirm()
        page.wait_text("#status", f"{tid}: the run in progress completes; {then}.")
        assert "now firing" not in page.text("#status") and not page.visible("#alert")


@browser_only
def test_with_namespace_a_token_the_page_never_shows_namespace_b(tmp_path, redis, hookwheel_factory,
                                                                receiver, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    for token, tid, queue in ((TOKEN_A, "only-a", "qa"), (TOKEN_B, "only-b", "qb")):
        status, _, body = hw.create({"id": tid, "url": receiver.url("/ns"), "delay_ms": 3600000,
                                     "queue": queue}, headers=bearer(token))
        assert status == 201, body
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.wait(lambda: page.cell("qa", "scheduled") == "1", "A's queue")
    assert not page.finds('#queues-table tr[data-queue="qb"]')
    assert "qb" not in page.text("#view-overview")
    page.open("#/timers?state=scheduled")
    page.wait(lambda: page.finds('#timers-table tr[data-id="only-a"]'), "A's timer listed")
    assert not page.finds('#timers-table tr[data-id="only-b"]')
    page.open("#/timers/only-b")
    page.wait(lambda: page.visible("#timer-missing"), "B's timer not found")
    assert "only-b" not in page.text("#timer-body") if page.finds("#timer-body") else True
    page.open("#/timers?state=scheduled&queue=qb")
    page.wait(lambda: page.visible("#timers-empty"), "an empty page for B's queue")


@browser_only
def test_the_next_token_sees_nothing_of_the_last_namespace_after_a_log_out_or_a_refused_token(
        tmp_path, redis, hookwheel_factory, browser):
    if vars(redis).get("cluster"):
        pytest.skip("writes one Redis's keys directly")
    hw = start(tmp_path, redis, hookwheel_factory)
    status, _, body = hw.request("POST", "/leases", json_body={"key": "a-only-lease", "owner": "worker-of-a",
                                 "ttl_ms": 600000}, headers=bearer(TOKEN_A))
    assert status == 201, body
    seed_stats_hour(redis, "team-a", time.time())
    page = Page(browser, hw)

    def login_in_place(token):  # in the same document, as an operator does: no reload
        page.wait(lambda: page.visible("#token"), "the log-in form")
        page.find("#token").send_keys(token)
        page.find("#login-form button[type=submit]").click()
        page.wait(lambda: page.visible("#nav"), "the views after logging in")

    def team_a_looks():  # the charts' queue chosen, a lease looked up
        page.find('#nav a[data-view="overview"]').click()
        page.wait(lambda: page.finds('#stats-queue option[value="reports"]'), "team-a's queues in the selector")
        page.find('#stats-queue option[value="reports"]').click()
        page.wait(lambda: "of queue reports" in page.find("#chart-deliveries svg").get_attribute("aria-label"),
                  "the chart of queue reports")
        page.find('#nav a[data-view="leases"]').click()
        page.find("#lease-key").send_keys("a-only-lease")
        page.find("#lease-form button[type=submit]").click()
        page.wait(lambda: "worker-of-a" in page.text("#lease-summary"), "team-a's lease looked up")

    def team_b_sees_nothing_of_a(how):
        login_in_place(TOKEN_B)
        page.wait(lambda: page.visible("#view-leases"), "the leases view again")
        page.wait(lambda: page.visible("#leases-empty"), "team-b's (empty) list of leases")
        assert not page.visible("#lease-found"), (how, page.text("#lease-summary"))
        assert "worker-of-a" not in page.text("#view-leases") and "a-only-lease" not in page.text("#view-leases")
        page.find('#nav a[data-view="overview"]').click()
        page.wait(lambda: page.visible("#stats-charts") and "Updated" in page.text("#queues-updated"),
                  "team-b's overview")
        time.sleep(0.5)  # a load of another queue would have drawn by now
        select = page.find("#stats-queue")
        options = [o.get_attribute("value") for o in select.find_elements("css selector", "option")]
        assert options == [""] and select.get_attribute("value") == "", (how, options)
        assert "reports" not in page.find("#chart-deliveries svg").get_attribute("aria-label"), how

    page.login(TOKEN_A)
    page.wait(lambda: page.visible("#nav"), "the views after logging in")
    team_a_looks()
    page.find("#logout").click()
    team_b_sees_nothing_of_a("after Log out")
    # team-a's token is refused from now on (restarted without it): the
    # page's next refresh gets a 401 and goes back to the log-in form
    page.find("#logout").click()
    login_in_place(TOKEN_A)
    team_a_looks()
    port = hw.port
    hw.stop()
    (tmp_path / "tokens").write_text(f"team-a ui-team-a-new-token-3e8f1a\nteam-b {TOKEN_B}\n")
    hw.port = port  # the page's origin: start() would pick another port
    hw._spawn()
    assert hw._wait_ready(scaled(15)) == "ready", hw.log_tail()
    page.wait(lambda: "refused (401" in (page.text("#login-error") or ""), "the 401 back at the log-in form",
              timeout=20)
    team_b_sees_nothing_of_a("after a 401")
    assert page.console_errors() == [], page.console_errors()


@browser_only
def test_the_leases_view_lists_held_leases_or_says_the_list_is_not_available(
        tmp_path, redis, hookwheel_factory, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    status, _, body = hw.request("POST", "/leases", json_body={"key": "orders-export",
                                 "owner": "worker-7", "ttl_ms": 60000}, headers=bearer(TOKEN_A))
    assert status == 201, body
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.wait(lambda: page.visible("#nav"), "the views after logging in")  # hidden until GET /queues answers
    page.find('#nav a[data-view="leases"]').click()
    page.wait(lambda: page.visible("#lease-form"), "the leases view")
    page.wait(lambda: page.finds('#leases-table tr[data-key="orders-export"]'), "the lease listed")
    assert "worker-7" in page.text('#leases-table tr[data-key="orders-export"]')
    page.find("#lease-key").send_keys("orders-export")
    page.find("#lease-form button[type=submit]").click()
    page.wait(lambda: page.visible("#lease-found"), "the lease found by key")
    text = page.text("#lease-summary")
    assert "worker-7" in text and "Token" in text and str(body["token"]) in text, text
    page.shot("leases")
    page.find("#lease-key").clear()
    page.find("#lease-key").send_keys("nobody-holds-this")
    page.find("#lease-form button[type=submit]").click()
    page.wait_text("#lease-missing", "No lease is held")


# --------------------------------------------------------------------------
# an hour of history: the figures every instance writes to Redis
# (persistence/stats.h), written there for the last hour the way
# instances would have, then read and drawn by the real binary and page


REPORTS_MINUTES = (0, 10, 30, 40, 50)  # of the hour's 60, the ones queue reports has figures in


def seed_stats_hour(redis, namespace, now_s):
    """Writes 60 minutes of figures of `namespace`'s queue billing, the
    current one last, with a quiet stretch (no attempts, so no lateness) in
    the middle, and a few minutes of queue reports; returns the minutes with
    attempts."""
    minute_now = int(now_s) // 60
    busy = 0
    for i in range(60):
        if 20 <= i < 25:
            continue
        key = f"hw:stats:{{ns:{namespace}}}:{minute_now - 59 + i}"
        # l3: 1-2 ms (service/tally.h's bounds), l7: 7.5-10 ms
        redis.cmd("HSET", key, "billing/d", 10 + i % 7, "billing/f", i % 3, "billing/a", 12 + i % 7,
                  "billing/fa", i % 3, "billing/l3", 11 + i % 7, "billing/l7", 1)
        if i in REPORTS_MINUTES:
            redis.cmd("HSET", key, "reports/d", 2, "reports/f", 1, "reports/a", 3, "reports/fa", 1,
                      "reports/l7", 3)
        redis.cmd("EXPIRE", key, 3600)
        busy += 1
    return busy


@browser_only
def test_the_overview_draws_the_last_hour_of_get_stats_as_line_charts_with_gaps(
        tmp_path, redis, hookwheel_factory, receiver, browser):
    if vars(redis).get("cluster"):
        pytest.skip("writes one Redis's keys directly")
    hw = start(tmp_path, redis, hookwheel_factory)
    for i, queue in enumerate(("billing", "billing", "billing", "reports", "emails", "emails")):
        status, _, body = hw.create({"id": f"st-{i}", "url": receiver.url("/st"), "delay_ms": 3600000,
                                     "queue": queue}, headers=bearer(TOKEN_A))
        assert status == 201, body
    busy = seed_stats_hour(redis, "team-a", time.time())
    status, _, stats = api_get(hw, "/stats?minutes=60")
    assert status == 200 and sum(1 for m in stats["minutes"] if m["lateness_ms"]["p50"] is not None) == busy
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.wait(lambda: page.finds("#chart-deliveries svg path.series-delivered"), "the deliveries line")
    assert not page.visible("#stats-note")

    def path_of(css):
        return page.find(css).get_attribute("d")
    delivered = path_of("#chart-deliveries svg path.series-delivered")
    assert delivered.count("M") == 1 and delivered.count("L") == 59, delivered  # no gaps
    p99 = path_of("#chart-lateness svg path.series-p99")
    assert p99.count("M") == 2 and p99.count("L") == busy - 2, p99  # a gap where lateness is null
    assert len(page.finds("#chart-lateness svg circle.series-p50")) == busy
    assert len(page.finds("#chart-deliveries svg circle.series-failed")) == 60
    # the highest point is under the top of the axis, inside the chart
    tops = [float(c.get_attribute("cy")) for c in page.finds("#chart-lateness svg circle.series-p99")]
    assert min(tops) >= 26 - 0.5, min(tops)
    page.wait(lambda: page.cell("billing", "scheduled") == "3", "the queues")
    # the queues table: each queue's hour from GET /stats's queue_totals
    totals = stats["queue_totals"]
    assert stats["queues"] == ["billing", "reports"], stats["queues"]
    for queue, want in (("billing", totals["billing"]), ("reports", totals["reports"]),
                        ("emails", {"delivered": 0, "failed": 0})):
        assert page.cell(queue, "delivered_1h") == str(want["delivered"]), queue
        assert page.cell(queue, "failed_1h") == str(want["failed"]), queue
    assert totals["reports"]["delivered"] == 2 * len(REPORTS_MINUTES)
    page.shot("overview-charts")
    # the charts' queue selector: All queues and the hour's queues; choosing
    # one draws that queue's minutes
    select = page.find("#stats-queue")
    assert page.text('label[for="stats-queue"]') == "Queue"
    assert [o.text for o in select.find_elements("css selector", "option")] == ["All queues", "billing", "reports"]

    def drawn(series):  # read in one script: the page redraws every second
        return page.d.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), (c) => +c.getAttribute('data-value'))",
            f"#chart-deliveries svg circle.series-{series}")
    page.wait(lambda: drawn("delivered") == [m["delivered"] for m in api_get(hw, "/stats?minutes=60")[2]["minutes"]],
              "the chart of all queues")
    select.find_element("css selector", 'option[value="reports"]').click()

    def shows_reports():
        answer = api_get(hw, "/stats?minutes=60&queue=reports")[2]["minutes"]
        return drawn("delivered") == [m["delivered"] for m in answer] and \
            drawn("failed") == [m["failed"] for m in answer]
    page.wait(shows_reports, "the chart of queue reports")
    assert sorted(set(drawn("delivered"))) == [0, 2] and sum(drawn("delivered")) <= 2 * len(REPORTS_MINUTES)
    assert "of queue reports" in page.find("#chart-deliveries svg").get_attribute("aria-label")
    # another namespace's token sees none of it
    page.find("#logout").click()
    page.login(TOKEN_B)
    page.wait(lambda: page.visible("#view-overview"), "the overview of team-b")
    status, _, other = api_get(hw, "/stats?minutes=60", token=TOKEN_B)
    assert status == 200 and all(m["delivered"] == 0 for m in other["minutes"])
    assert page.console_errors() == [], page.console_errors()


@browser_only
def test_the_leases_view_lists_every_held_lease(tmp_path, redis, hookwheel_factory, browser):
    hw = start(tmp_path, redis, hookwheel_factory)
    for key, owner, ttl in (("orders-export", "worker-7", 30000), ("billing-leader", "billing-2", 10000),
                            ("nightly-report", "cron-host-1", 60000)):
        status, _, body = hw.request("POST", "/leases", json_body={"key": key, "owner": owner, "ttl_ms": ttl},
                                     headers=bearer(TOKEN_A))
        assert status == 201, body
    page = Page(browser, hw)
    page.login(TOKEN_A)
    page.open("#/leases")
    page.wait(lambda: len(page.finds("#leases-table tr[data-key]")) == 3, "the three leases")
    assert not page.visible("#leases-note")
    row = page.text('#leases-table tr[data-key="orders-export"]')
    assert "worker-7" in row, row
    page.shot("leases-list")
    assert page.console_errors() == [], page.console_errors()

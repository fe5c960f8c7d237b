"""GET /metrics: the Prometheus text exposition (format 0.0.4) of one instance,
read with a maintained parser (Debian's python3-prometheus-client), against a
real redis-server, the real binary and a real receiver.

What is counted where (service/metrics.h): created when Redis confirmed a new
timer (before the 201); cancelled when a DELETE or a bulk cancel cancelled it (once);
delivered/retried/failed when Redis confirmed recording the attempt's outcome;
attempts, lateness and duration once per HTTP attempt. So after the traffic
settles every counter has moved by exactly what the test did."""

import re
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from conftest import CLUSTER_MODE, SLOW, Reply, assert_created, scaled, wait_until

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CLASSES = ("2xx", "3xx", "4xx", "5xx", "timeout", "connect_error", "refused", "other")
EVENTS = ("created", "cancelled", "delivered", "retried", "failed", "stopped")
HISTOGRAMS = ("hookwheel_firing_lateness_seconds", "hookwheel_attempt_duration_seconds")
GAUGES = ("hookwheel_timers_claimed", "hookwheel_timers_in_wheel", "hookwheel_redis_queued_writes",
          "hookwheel_redis_up", "hookwheel_redis_refusing_writes", "hookwheel_instance_lease_age_seconds",
          "hookwheel_instance_lease_ttl_seconds", "hookwheel_redis_masters")
COUNTERS = ("hookwheel_redis_moved_total", "hookwheel_redis_ask_total", "hookwheel_redis_tryagain_total",
            "hookwheel_redis_slot_map_refreshes_total", "hookwheel_redis_replica_ack_timeouts_total")


class Scrape:
    """One parsed scrape: samples by (name, sorted label items)."""

    def __init__(self, text):
        self.text = text
        self.families = {}
        self.samples = {}
        for fam in text_string_to_metric_families(text):
            assert fam.name not in self.families, f"family {fam.name} appears twice"
            self.families[fam.name] = fam
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                assert key not in self.samples, f"series {key} appears twice"
                self.samples[key] = s.value

    def value(self, name, **labels):
        """The sample's value; 0 for a queue that has no label yet."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def event(self, event, queue):
        return self.value(f"hookwheel_timers_{event}_total", queue=queue)

    def attempts(self, queue, cls):
        return self.value("hookwheel_attempts_total", queue=queue, **{"class": cls})

    def bucket(self, hist, le):
        return self.value(f"{hist}_bucket", le=le)

    def count(self, hist):
        return self.value(f"{hist}_count")


def scrape(hw, headers=None):
    t0 = time.monotonic()
    status, h, body = hw.request("GET", "/metrics", headers=headers)
    elapsed = time.monotonic() - t0
    assert status == 200, (status, body)
    assert h.get("Content-Type") == CONTENT_TYPE, h
    assert isinstance(body, bytes)
    s = Scrape(body.decode("utf-8"))
    s.elapsed = elapsed
    return s


def assert_well_formed(s):
    """Every family has HELP and TYPE lines, in that order, right before its
    samples, and every family the docs promise is there."""
    lines = s.text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert lines[i + 1].startswith(f"# TYPE {name} "), lines[i:i + 2]
            assert len(line.split(" ", 3)) == 4 and line.split(" ", 3)[3].strip(), line
    types = {line.split()[2]: line.split()[3] for line in lines if line.startswith("# TYPE ")}
    for event in EVENTS:
        assert types.get(f"hookwheel_timers_{event}_total") == "counter", event
    assert types.get("hookwheel_attempts_total") == "counter"
    for hist in HISTOGRAMS:
        assert types.get(hist) == "histogram", hist
    for gauge in GAUGES + ("hookwheel_timers_ready", "hookwheel_attempts_in_flight"):
        assert types.get(gauge) == "gauge", gauge
    for counter in COUNTERS:
        assert types.get(counter) == "counter", counter


def assert_histogram_consistent(s, hist):
    fam = s.families[hist]
    buckets = [(float(x.labels["le"]), x.value) for x in fam.samples if x.name == f"{hist}_bucket"]
    assert buckets == sorted(buckets), f"{hist}: buckets out of order or not cumulative: {buckets}"
    assert [b for b, _ in buckets][:4] == [0.001, 0.002, 0.005, 0.01], buckets
    assert buckets[-1][0] == float("inf"), buckets
    values = [v for _, v in buckets]
    assert values == sorted(values), f"{hist}: cumulative buckets decrease: {buckets}"
    assert s.count(hist) == values[-1], f"{hist}: _count {s.count(hist)} != +Inf bucket {values[-1]}"


def counts(s, queues):
    """Everything the traffic test moves, as one comparable dict."""
    out = {}
    for q in queues:
        for e in EVENTS:
            out[(e, q)] = s.event(e, q)
        for c in CLASSES:
            out[("attempts", q, c)] = s.attempts(q, c)
    for hist in HISTOGRAMS:
        out[(hist, "count")] = s.count(hist)
    return out


def delta(after, before):
    return {k: after[k] - before.get(k, 0.0) for k in after}


def test_counters_move_by_exactly_the_timers_created_delivered_failed_retried_and_cancelled(
        hookwheel, receiver):
    N, M, K, C = 6, 4, 3, 5
    queues = ("mt-ok", "mt-gone", "mt-flaky", "mt-cancel")
    before = scrape(hookwheel)
    assert_well_formed(before)
    base = counts(before, queues)

    receiver.default("/gone", Reply(404))
    ids = []
    for i in range(N):
        spec = {"id": f"ok-{i}", "url": receiver.url("/ok"), "delay_ms": 200 + 20 * i, "queue": "mt-ok"}
        ids.append(assert_created(*hookwheel.create(spec))["id"])
    for i in range(M):
        spec = {"id": f"gone-{i}", "url": receiver.url("/gone"), "delay_ms": 200, "queue": "mt-gone"}
        assert_created(*hookwheel.create(spec))
    for i in range(K):
        receiver.plan(f"/flaky/{i}", [500])  # then the default 204
        spec = {"id": f"flaky-{i}", "url": receiver.url(f"/flaky/{i}"), "delay_ms": 200, "queue": "mt-flaky",
                "retry": {"max_attempts": 3, "min_backoff_ms": 50, "max_backoff_ms": 100}}
        assert_created(*hookwheel.create(spec))
    for i in range(C):
        spec = {"id": f"cancel-{i}", "url": receiver.url("/never"), "delay_ms": 60000, "queue": "mt-cancel"}
        assert_created(*hookwheel.create(spec))
    # the same id and spec again: an idempotent 200, not a second timer
    status, _, body = hookwheel.create(spec)
    assert status == 200, (status, body)
    # created counts before the 201 is sent, so this scrape sees every create
    mid = scrape(hookwheel)
    for q, n in (("mt-ok", N), ("mt-gone", M), ("mt-flaky", K), ("mt-cancel", C)):
        assert mid.event("created", q) - before.event("created", q) == n, q
    for i in range(C):
        status, _, body = hookwheel.cancel(f"cancel-{i}")
        assert status == 200 and body["state"] == "cancelled", (status, body)
    status, _, _ = hookwheel.cancel("cancel-0")  # a repeated DELETE: 200, not counted again
    assert status == 200

    expected = {k: 0.0 for k in base}
    expected.update({
        ("created", "mt-ok"): N, ("created", "mt-gone"): M, ("created", "mt-flaky"): K,
        ("created", "mt-cancel"): C, ("cancelled", "mt-cancel"): C,
        ("delivered", "mt-ok"): N, ("delivered", "mt-flaky"): K,
        ("failed", "mt-gone"): M, ("retried", "mt-flaky"): K,
        ("attempts", "mt-ok", "2xx"): N, ("attempts", "mt-gone", "4xx"): M,
        ("attempts", "mt-flaky", "5xx"): K, ("attempts", "mt-flaky", "2xx"): K,
        (HISTOGRAMS[0], "count"): N + M + 2 * K, (HISTOGRAMS[1], "count"): N + M + 2 * K,
    })
    got = {}

    def settled():
        got["delta"] = delta(counts(scrape(hookwheel), queues), base)
        return got["delta"] == expected
    assert wait_until(settled, scaled(15), interval=0.1), {
        k: (v, expected[k]) for k, v in got["delta"].items() if v != expected[k]}
    assert len(receiver.requests()) == N + M + 2 * K
    time.sleep(0.5)  # nothing counted twice afterwards
    after = scrape(hookwheel)
    assert delta(counts(after, queues), base) == expected

    assert_well_formed(after)
    for hist in HISTOGRAMS:
        assert_histogram_consistent(after, hist)
    # local receiver, idle engine: every attempt started and ended within a second
    # (2.5 s under the sanitizers)
    le = "2.5" if SLOW else "1"
    for hist in HISTOGRAMS:
        assert after.bucket(hist, le) == after.count(hist), (hist, after.text)
        assert 0 < after.value(f"{hist}_sum") < after.count(hist) * float(le)
    for q in queues:
        assert after.value("hookwheel_attempts_in_flight", queue=q) == 0, q
        assert after.value("hookwheel_timers_ready", queue=q) == 0, q
    assert after.value("hookwheel_timers_claimed") == 0
    assert after.value("hookwheel_timers_in_wheel") == 0
    assert after.value("hookwheel_redis_up") == 1
    # one Redis: one master (a cluster: its three), and no redirections
    assert after.value("hookwheel_redis_masters") == (3 if CLUSTER_MODE else 1)
    redirects = {c: after.value(c) for c in COUNTERS}
    if CLUSTER_MODE:  # a cluster's slot map is learned at start
        assert redirects.pop("hookwheel_redis_slot_map_refreshes_total") >= 1
    assert set(redirects.values()) == {0}, redirects
    assert after.value("hookwheel_redis_queued_writes") >= 0
    ttl = after.value("hookwheel_instance_lease_ttl_seconds")
    assert ttl == 10.0, ttl  # the default lease-ttl-ms
    assert 0 <= after.value("hookwheel_instance_lease_age_seconds") < ttl
    assert after.value("hookwheel_build_info", version=after.families["hookwheel_build_info"]
                       .samples[0].labels["version"]) == 1


def test_gauges_show_timers_in_the_wheel_and_attempts_in_flight_per_queue(hookwheel, receiver):
    receiver.default("/slow", Reply(204, delay_s=1.5))
    for i in range(3):
        spec = {"id": f"slow-{i}", "url": receiver.url("/slow"), "delay_ms": 1500, "queue": "mt-slow"}
        assert_created(*hookwheel.create(spec))
    # claimed at once (due within the window) and waiting in the wheel
    s = wait_until(lambda: (lambda x: x if x.value("hookwheel_timers_in_wheel") == 3 else None)(
        scrape(hookwheel)), scaled(2), interval=0.05)
    assert s, "the three timers never showed in the wheel"
    assert s.value("hookwheel_timers_claimed") == 3
    assert s.value("hookwheel_attempts_in_flight", queue="mt-slow") == 0
    # then all three in flight at the receiver for 1.5 s
    receiver.wait_for(3, scaled(5), path="/slow")
    s = scrape(hookwheel)
    assert s.value("hookwheel_attempts_in_flight", queue="mt-slow") == 3, s.text
    assert s.value("hookwheel_timers_claimed") == 3
    assert s.value("hookwheel_timers_in_wheel") == 0
    assert s.elapsed < 0.5, f"a scrape took {s.elapsed:.3f} s while attempts were in flight"

    def drained():
        x = scrape(hookwheel)
        return x.value("hookwheel_attempts_in_flight", queue="mt-slow") == 0 and \
            x.event("delivered", "mt-slow") == 3 and x.value("hookwheel_timers_claimed") == 0
    assert wait_until(drained, scaled(10), interval=0.1)


def test_an_idle_instance_shows_no_queued_redis_writes_of_its_own_scrapes(hookwheel):
    # a scrape a second or more after the previous one also asks Redis for
    # the queue counts (one call per partition): those calls are not what
    # the scrape reports as waiting for the writer
    time.sleep(1.2)
    seen = []
    for _ in range(5):
        seen.append(scrape(hookwheel).value("hookwheel_redis_queued_writes"))
        time.sleep(1.1)
    assert sum(1 for v in seen if v) <= 1, seen


def test_a_callback_timer_is_not_counted_as_created_but_its_attempt_and_delivery_are(hookwheel, receiver):
    receiver.default("/cb", Reply(204))
    before = scrape(hookwheel)
    assert_created(*hookwheel.create({"id": "with-cb", "url": receiver.url("/cb"), "delay_ms": 0,
                                      "queue": "mt-cb", "on_success": receiver.url("/cb")}))
    receiver.wait_for(2, scaled(10), path="/cb")  # the timer's delivery, then its callback's

    def settled():
        s = scrape(hookwheel)
        return s if s.event("delivered", "mt-cb") == 2 else None
    s = wait_until(settled, scaled(5), interval=0.1)
    assert s, scrape(hookwheel).text
    assert s.event("created", "mt-cb") - before.event("created", "mt-cb") == 1
    assert s.attempts("mt-cb", "2xx") == 2


def test_while_redis_is_down_redis_up_reads_0_and_metrics_still_answer_at_once(redis, hookwheel):
    assert scrape(hookwheel).value("hookwheel_redis_up") == 1
    port = redis.port
    redis.stop()
    slowest = [0.0]

    def down():
        s = scrape(hookwheel)
        slowest[0] = max(slowest[0], s.elapsed)
        return s if s.value("hookwheel_redis_up") == 0 else None
    # the store notices at its next command: a sweep (every window/2) or a renewal
    s = wait_until(down, scaled(10), interval=0.1)
    assert s, "hookwheel_redis_up never read 0 while Redis was stopped"
    assert slowest[0] < 0.5, f"a scrape took {slowest[0]:.3f} s while Redis was down"
    # the lease cannot be renewed meanwhile: its age grows past the renewal period
    time.sleep(1.0)
    s2 = scrape(hookwheel)
    assert s2.value("hookwheel_redis_up") == 0
    assert s2.value("hookwheel_instance_lease_age_seconds") > s.value("hookwheel_instance_lease_age_seconds")
    redis.start(port=port)
    assert wait_until(lambda: scrape(hookwheel).value("hookwheel_redis_up") == 1, scaled(10), interval=0.1)
    assert wait_until(lambda: scrape(hookwheel).value("hookwheel_instance_lease_age_seconds") < 5.0,
                      scaled(10), interval=0.1)


def test_with_api_tokens_metrics_need_a_token(tmp_path, redis, hookwheel_factory):
    token = "metrics-scraper-token-6b2d91"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ops {token}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    status, h, _ = hw.request("GET", "/metrics")
    assert status == 401 and h.get("WWW-Authenticate", "").startswith("Bearer"), status
    s = scrape(hw, headers={"Authorization": f"Bearer {token}"})
    assert s.value("hookwheel_redis_up") == 1


def readme_metrics():
    """{name: (type, {labels})} of the README's table of metrics."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = text.split("### Metrics: `GET /metrics`", 1)[1].split("### Scraping", 1)[0]
    out = {}
    for m in re.finditer(r"^\| `(hookwheel_[a-z_]+)` \| (\w+) \|([^|]*)\|", table, re.M):
        out[m.group(1)] = (m.group(2), set(re.findall(r"`(\w+)`", m.group(3))))
    return out


def test_the_readme_lists_every_metric_family_with_its_type_and_labels(hookwheel, receiver):
    # a timer of a queue, a DELETE and a bulk cancel, so that every family has samples
    assert_created(*hookwheel.create({"id": "doc-1", "url": receiver.url("/d"), "delay_ms": 0, "queue": "doc"}))
    for i in range(3):
        assert_created(*hookwheel.create({"id": f"doc-bulk-{i}", "url": receiver.url("/d"), "delay_ms": 600000,
                                          "queue": "doc", "labels": {"batch": "doc"}}))
    assert_created(*hookwheel.create({"id": "doc-del", "url": receiver.url("/d"), "delay_ms": 600000,
                                      "queue": "doc"}))
    assert hookwheel.cancel("doc-del")[0] == 200
    status, _, body = hookwheel.request("POST", "/timers/cancel", json_body={"labels": {"batch": "doc"}},
                                        headers={"Idempotency-Key": "doc-bulk"})
    assert status == 200 and len(body["cancelled"]) == 3, body
    status, _, again = hookwheel.request("POST", "/timers/cancel", json_body={"labels": {"batch": "doc"}},
                                         headers={"Idempotency-Key": "doc-bulk"})
    assert status == 200 and again["cancelled"] == body["cancelled"], again
    assert hookwheel.wait_state("doc-1", "delivered", scaled(5))["state"] == "delivered"
    scrape(hookwheel)
    time.sleep(1.1)  # the queue counts are read by a scrape, shown by the next
    s = scrape(hookwheel)
    # the DELETE and the bulk cancel's three, each once (the repeated receipt cancelled nothing)
    assert s.event("cancelled", "doc") == 4, s.text
    got = {}
    for name, fam in s.families.items():
        full = name + "_total" if fam.type == "counter" else name
        labels = set()
        for x in fam.samples:
            labels |= set(x.labels) - {"le"}
        got[full] = (fam.type, labels)
    assert got == readme_metrics()

"""Integration test of a graceful stop while an outcome waits to be written:
the finish of an attempt found Redis unreachable and waits (parked) to be
sent again; a SIGTERM in that moment sends it before the claims are handed
back, so the delivered timer is not handed back as interrupted and
delivered a second time."""

import signal
import time

import pytest

from conftest import CLUSTER_MODE, Reply, scaled


@pytest.mark.skipif(CLUSTER_MODE, reason="stops one Redis")
def test_a_stop_while_a_finish_waits_for_redis_records_it_and_hands_nothing_back(redis, hookwheel_factory,
                                                                                   receiver):
    receiver.plan("/slow", [Reply(200, delay_s=1.0)])
    a = hookwheel_factory(redis, args=["--redis-timeout-ms", "500"])
    status, _, timer = a.create({"url": receiver.url("/slow"), "delay_ms": 0})
    assert status == 201, timer
    tid = timer["id"]
    deadline = time.monotonic() + scaled(10)
    while not receiver.requests("/slow") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert receiver.requests("/slow"), "no attempt"
    # The answer comes 1 s after the request; its finish finds Redis down.
    # The stop comes while it is still down, and Redis is back soon after,
    # well within the stop's grace.
    arrived = time.monotonic()
    port = redis.port
    redis.stop()
    time.sleep(max(0.0, arrived + 1.6 - time.monotonic()))
    a.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    redis.start(port=port)
    assert a.stop(signal.SIGTERM, timeout=scaled(20)) == 0
    assert "could not hand claims back" not in a.log_tail(400)
    # Had the claim been left behind, b would take it over once a's lease
    # lapsed (10 s) and deliver the timer again.
    b = hookwheel_factory(redis)
    time.sleep(scaled(12))
    done = b.get(tid)[2]
    assert done.get("state") == "delivered" and done["attempts"] == 1, done
    got = receiver.requests("/slow")
    assert len(got) == 1, f"delivered {len(got)} times"

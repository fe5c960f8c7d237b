"""hookwheel behind Redis Sentinel: one master, one replica and three real
sentinels on loopback ports; HOOKWHEEL_REDIS_URL=redis+sentinel://<sentinels>/<name>
and HOOKWHEEL_REDIS_MIN_REPLICAS_ACK=1, so a create is acknowledged only once
the replica has it. The master is killed (-9) under a steady stream of
creates: the sentinels promote the replica, hookwheel follows without a
restart, requests in between get 503 or succeed, and every acknowledged
timer exists afterwards and is delivered."""
import signal
import time

import pytest

from cluster import CreateStream, RedisSentinels
from conftest import SLOW, scaled, wait_until

# Once, not again under the sanitizers: the store's WAIT and READONLY paths are
# also run there by test_cluster.py's failover test, and a minute of failovers
# twice would not find more.
pytestmark = pytest.mark.skipif(SLOW, reason="slow suite; run once, without sanitizers")


@pytest.fixture
def sentinels(tmp_path):
    s = RedisSentinels(tmp_path / "sentinel")
    try:
        s.start()
        yield s
    finally:
        s.stop()


def test_a_master_killed_under_creates_loses_no_acknowledged_timer(sentinels, hookwheel_factory, receiver):
    hw = hookwheel_factory(sentinels.url, args=["--redis-min-replicas-ack", "1",
                                                "--redis-replica-ack-timeout-ms", "500"])
    stream = CreateStream(hw, receiver.url("/failover"), "fo")
    acked = stream.acked
    try:
        assert wait_until(lambda: len(acked) > 200, scaled(10))
        old = sentinels.master
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait(timeout=10)
        # the replica is promoted; then the old master comes back (as a replica
        # of the new one), so that writes can be acknowledged by a replica again
        assert wait_until(lambda: sentinels.current_master() is sentinels.replicas[0], scaled(30), interval=0.2)
        n_at_promotion = len(acked)
        old.start(port=old.port)
        assert wait_until(lambda: len(acked) > n_at_promotion + 200, scaled(30), interval=0.2), \
            "no create was acknowledged after the failover: hookwheel did not follow the promotion"
    finally:
        stream.stop()
    errors, refused = stream.errors, stream.refused
    assert not errors, errors[:5]
    assert refused, "no request met the failover (503): the test proves nothing"
    # every acknowledged timer exists on the new master and is delivered
    for tid in acked[::25]:
        status, _, body = hw.get(tid)
        assert status == 200, (tid, status, body)
    want = set(acked)
    receiver.wait_until(lambda reqs: {r.timer_id for r in reqs if r.path == "/failover"} >= want, scaled(40))
    # it asked the sentinels again and connected to the promoted replica
    new = f'"node":"127.0.0.1:{sentinels.replicas[0].port}"'
    assert any("Redis Sentinel names the master" in line and new in line
               for line in hw.log.read_text(errors="replace").splitlines())


def test_without_a_replica_to_acknowledge_creates_answer_503_and_a_retry_succeeds_later(
        sentinels, hookwheel_factory, receiver):
    hw = hookwheel_factory(sentinels.url, args=["--redis-min-replicas-ack", "1",
                                                "--redis-replica-ack-timeout-ms", "300"])
    spec = {"id": "needs-replica", "url": receiver.url("/r"), "delay_ms": 1000}
    replica = sentinels.replicas[0]
    replica.proc.send_signal(signal.SIGSTOP)  # alive but silent: WAIT cannot be satisfied
    try:
        status, headers, body = hw.create(spec)
        assert status == 503, (status, body)
        assert headers.get("Retry-After"), headers
        status, _, text = hw.request("GET", "/metrics")
        text = text.decode() if isinstance(text, bytes) else text
        assert "\nhookwheel_redis_replica_ack_timeouts_total 0\n" not in text
        assert "\nhookwheel_redis_replica_ack_timeouts_total " in text
        # a batch's items wait for the replica too: none is answered as stored
        status, _, answer = hw.api.request("POST", "/timers/batch", json_body={"timers": [
            {"id": f"needs-replica-{i}", "url": receiver.url("/r"), "delay_ms": 1000} for i in range(3)]})
        assert status == 200, answer
        assert [it["status"] for it in answer["items"]] == [503] * 3, answer
        # reads and deliveries do not wait for replicas
        status, _, _ = hw.get("needs-replica")
        assert status in (200, 404)
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    # the same request again, once the replica answers: acknowledged (201, or
    # 200 when the first one had reached the master)
    assert wait_until(lambda: hw.create(spec)[0] in (200, 201), scaled(15), interval=0.3)
    assert receiver.wait_for(1, scaled(10), path="/r")


def test_a_planned_failover_is_followed_when_the_sentinels_switch_not_when_the_old_master_is_demoted(
        sentinels, hookwheel_factory, receiver):
    """SENTINEL FAILOVER (a planned switch) promotes the replica at once,
    but the old master stays a master, and takes writes, until the
    sentinels make it a replica some 10 s later, which drops all it took
    meanwhile: acknowledged creates, claims, outcomes, the instances'
    leases. hookwheel must follow the sentinels' switch, not wait for the
    old master's demotion: a timer created 3 s after the switch is on the
    new master."""
    hw = hookwheel_factory(sentinels.url)
    old, new = sentinels.master, sentinels.replicas[0]
    assert hw.create({"id": "before-switch", "url": receiver.url("/sw"), "delay_ms": 60000})[0] == 201
    sentinels.sentinels[0].cmd("SENTINEL", "FAILOVER", sentinels.name)
    assert wait_until(lambda: all(sentinels.sentinel_master(s) == new.port for s in sentinels.sentinels),
                      scaled(10), interval=0.05)
    time.sleep(3.0)
    assert old.cmd("ROLE")[0] == "master", "the old master was demoted already: this test needs it not to be"
    status, _, body = hw.create({"id": "after-switch", "url": receiver.url("/sw"), "delay_ms": 500})
    assert status == 201, body
    assert new.keys("hw:*after-switch*"), "the create was written to the old master, which will drop it"
    assert receiver.wait_for(1, scaled(10), path="/sw")
    assert any("Redis Sentinel names another master" in line
               for line in hw.log.read_text(errors="replace").splitlines())

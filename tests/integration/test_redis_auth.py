"""A Redis with ACL users, as managed Redis services run it: the default user
is off and hookwheel logs in as its own user from the URL
(redis://user:password@host:port). Real redis-server, real binary, real
receiver."""
import time

import pytest

from conftest import CLUSTER_MODE, Hookwheel, free_port, scaled, wait_until

pytestmark = pytest.mark.skipif(CLUSTER_MODE, reason="configures its own Redis")


def acl_redis(redis):
    redis.cmd("ACL", "SETUSER", "hookwheel", "on", ">s3cret:pass", "~*", "&*", "+@all")
    redis.cmd("ACL", "SETUSER", "default", "off")


def test_an_acl_user_from_the_url_creates_and_delivers(redis, hookwheel_factory, receiver):
    port = redis.port
    acl_redis(redis)
    hw = hookwheel_factory(f"redis://hookwheel:s3cret%3Apass@127.0.0.1:{port}")
    status, _, body = hw.create({"id": "acl-1", "url": receiver.url("/acl"), "delay_ms": 200})
    assert status == 201, body
    assert receiver.wait_for(1, scaled(10), path="/acl")
    assert hw.wait_state("acl-1", ("delivered",), scaled(5))


def test_a_wrong_password_keeps_the_instance_unready_and_says_why(redis, tmp_path):
    acl_redis(redis)
    # at info: at debug every refusal is logged
    hw = Hookwheel(tmp_path, f"redis://hookwheel:wrong@127.0.0.1:{redis.port}", name="wrong",
                   args=["--log-level", "info"])
    hw.port = free_port()
    hw._spawn()  # not start(): it would wait for a readiness that must not come
    try:
        assert wait_until(lambda: "Redis refused a start-up command" in hw.log_tail(200), scaled(10))
        assert wait_until(lambda: _status(hw, "/readyz") == 503, scaled(5))
        assert hw.alive(), "a Redis that refuses the login is waited for, not fatal"
        status, _, _ = hw.create({"id": "nope", "url": "http://127.0.0.1:9/x", "delay_ms": 100})
        assert status == 503
        # several reconnects (the backoff grows to 2 s): the refusal is said once a connection,
        # the timers' and the leases' (at every reconnect before)
        time.sleep(5.0)
        refusals = [line for line in hw.log_tail(400).splitlines() if "Redis refused a start-up command" in line]
        assert 1 <= len(refusals) <= 2, refusals
    finally:
        hw.stop()


def test_a_user_that_may_not_load_the_functions_is_told_so_not_to_upgrade_redis(redis, tmp_path):
    redis.cmd("ACL", "SETUSER", "hookwheel", "on", ">s3cret:pass", "~*", "&*", "+@all", "-function|load")
    # at info: at debug every refusal is logged
    hw = Hookwheel(tmp_path, f"redis://hookwheel:s3cret%3Apass@127.0.0.1:{redis.port}", name="noload",
                   args=["--log-level", "info"])
    hw.port = free_port()
    hw._spawn()  # not start(): it would wait for a readiness that must not come
    try:
        assert wait_until(lambda: "NOPERM" in hw.log_tail(200), scaled(10)), hw.log_tail()
        assert wait_until(lambda: _status(hw, "/readyz") == 503, scaled(5))
        refusals = [line for line in hw.log_tail(200).splitlines() if "function library" in line]
        assert refusals and all("may not load it" in line and "7.0" not in line for line in refusals), refusals
        # several reconnects (the backoff grows to 2 s): the refusal is said once a connection,
        # the timers' and the leases' (14 lines in these 5 s when it was said at every reconnect)
        time.sleep(5.0)
        refusals = [line for line in hw.log_tail(400).splitlines() if "function library" in line]
        assert len(refusals) <= 2, refusals
    finally:
        hw.stop()


def _status(hw, path):
    try:
        return hw.request("GET", path)[0]
    except OSError:
        return None

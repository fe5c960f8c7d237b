"""docker/docker-compose.yml brought up for real on dockerd: the image built
from docker/Dockerfile, Redis with docker/redis.conf and its volume, the two
hookwheel replicas and nginx with docker/nginx.conf, plus a webhook receiver
on the compose network (tests/compose/compose.test.yml lays the images made
offline by tests/compose/images.sh over the file's).

Run by `make test-compose` (part of `make test`), as root or a member of the
docker group. When no Docker engine can run here, or the images cannot be
built, the module is skipped with the reason; once the stack is up every
check is a real assertion.
"""
import json

from stacks import docker, delivered_once, wait_until


def test_the_file_starts_two_replicas_behind_nginx(stack):
    assert len(stack.addresses("hookwheel")) == 2, stack.addresses("hookwheel")
    status, body = stack.http("GET", "/healthz")
    assert status == 200, body
    # /metrics is not served on the public port
    assert stack.http("GET", "/metrics")[0] == 404


def test_a_timer_created_through_nginx_is_delivered_once(stack):
    status, body = stack.http("POST", "/timers", {"id": "compose-1", "delay_ms": 300,
                                                   "url": "http://receiver:8080/hook/compose-1",
                                                   "json": {"hello": "compose"}})
    assert status == 201, body
    got = delivered_once(stack, "compose-1", 30)
    assert json.loads(got["body"]) == {"hello": "compose"}
    timer = wait_until(lambda: (lambda s, b: s == 200 and json.loads(b)["state"] == "delivered" and json.loads(b))(
        *stack.http("GET", "/timers/compose-1")), 15, "compose-1 delivered")
    assert timer["attempts"] == 1


def test_replicas_recreated_at_new_addresses_are_found_by_nginx(stack):
    """`up -d` after a change recreates the replicas; their old addresses may
    go to other containers. nginx must follow the name, not the old ones."""
    old = stack.addresses("hookwheel")
    stack.compose("rm", "-s", "-f", "hookwheel")
    # Two containers take the freed addresses, as others on a busy network would.
    squatters = [docker("run", "-d", "--rm", "--network", f"{stack.project}_default",
                        "hookwheel-test/nginx:testing", "sleep", "300").strip() for _ in old]
    try:
        stack.compose("up", "-d", "--no-deps", "hookwheel")
        new = stack.addresses("hookwheel")
        assert len(new) == 2 and not set(new) & set(old), (old, new)

        def all_answered():
            return all(stack.http("GET", "/timers/compose-1")[0] == 200 for _ in range(10))
        wait_until(all_answered, 45, "every request through nginx answered by a recreated replica")
        for _ in range(20):
            status, body = stack.http("GET", "/timers/compose-1")
            assert status == 200, (status, body)
    finally:
        for c in squatters:
            docker("rm", "-f", c, check=False)


def test_timers_outlive_down_and_up(stack):
    """`down` keeps the volume: a timer created before it and due after the
    stack is up again is delivered, once. (It is made due only once the
    stack is up: `down` alone can take longer than a short delay on a busy
    machine, and a delivery before the receiver is recreated is lost with
    its log.)"""
    status, body = stack.create("compose-2", 600000, "later")
    assert status == 201, body
    stack.compose("down")
    stack.up()
    status, body = stack.http("GET", "/timers/compose-2")
    assert status == 200 and json.loads(body)["state"] == "scheduled", body
    status, body = stack.http("POST", "/timers/compose-2/reschedule", {"delay_ms": 1000})
    assert status == 200, body
    assert delivered_once(stack, "compose-2", 40)["body"] == "later"
    status, body = stack.http("GET", "/timers/compose-1")
    assert status == 200 and json.loads(body)["state"] == "delivered", body

"""One namespace's watchdog leases cannot take the probes another namespace's
leases live on (README "Watchdog leases", "Limits"): an instance runs at most
256 probes at once, at most 64 of one namespace, so a tenant whose many
probe_urls answer just before the probe timeout leaves room for the others'
probes, and their holders stay alive. Real redis-server, real binary, real receiver."""
import threading
import time

import pytest

from conftest import CLUSTER_MODE, Reply, scaled

TOKEN_A = "tenant-a-token-5c1e9f27b8d4"
TOKEN_B = "tenant-b-token-a0e6d3b58c21"
TTL_MS = 6000        # a period of 2 s, and a probe timeout of 2 s
A_LEASES = 1500      # their probes answer just before the probe timeout: each holds a probe 1.9 s
B_LEASES = 20


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def acquire_all(hw, token, keys, probe_url, threads=8):
    errors = []

    def run(part):
        api = hw.api.session()
        for key in part:
            status, _, body = api.request("POST", "/leases", headers=bearer(token),
                                          json_body={"key": key, "owner": "holder", "ttl_ms": TTL_MS,
                                                     "probe_url": probe_url})
            if status != 201:
                errors.append((key, status, body))

    parts = [keys[i::threads] for i in range(threads)]
    ts = [threading.Thread(target=run, args=(p,)) for p in parts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:5]


@pytest.mark.skipif(CLUSTER_MODE, reason="leases on a cluster are test_cluster.py's")
def test_a_namespace_whose_probes_answer_late_leaves_probes_for_another_namespace_s_leases(
        tmp_path, redis, receiver, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"a {TOKEN_A}\nb {TOKEN_B}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    receiver.default("/a-slow", Reply(200, delay_s=1.9))
    receiver.default("/b-alive", Reply(200))
    acquire_all(hw, TOKEN_A, [f"a{i:04d}" for i in range(A_LEASES)], receiver.url("/a-slow"))
    b_keys = [f"b{i:02d}" for i in range(B_LEASES)]
    acquire_all(hw, TOKEN_B, b_keys, receiver.url("/b-alive"))
    t0 = time.monotonic()
    # B's holders never heartbeat: only their probes speak for them. Past
    # 2 x ttl a lease whose probes never ran has expired.
    time.sleep(scaled(2.2 * TTL_MS / 1000))
    lost = []
    for key in b_keys:
        status, _, _ = hw.api.request("GET", f"/leases/{key}", headers=bearer(TOKEN_B))
        if status != 200:
            lost.append((key, status))
    probes = receiver.requests("/b-alive")
    assert not lost, (f"{len(lost)} of {B_LEASES} leases of namespace b expired within "
                      f"{time.monotonic() - t0:.1f} s while their probe_url answered 200 at once "
                      f"({len(probes)} probes reached it; namespace a's slow probes: "
                      f"{len(receiver.requests('/a-slow'))}): {lost[:5]}")

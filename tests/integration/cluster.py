"""A real Redis Cluster for the integration tests: redis-server processes
started with --cluster-enabled yes on loopback ports (each a RedisServer of
conftest, so stopped by pid) and joined with `redis-cli --cluster create`.

RedisCluster(dir, masters=3, replicas=1).start() waits until every node
reports cluster_state:ok and every replica is in sync; stop() stops them all.
With tls={"cert": .., "key": .., "ca": ..} every node also gets a TLS port
and the cluster's own links use TLS (tls-cluster); the harness goes on using
the plain ports, tls_url names the TLS ones (CLUSTER SLOTS and redirections
give a client the ports of its own kind).
cmd() sends a command to the master of its key's slot, as a cluster client
would; crossslot_errors() sums Redis's own CROSSSLOT counters over the nodes."""
import subprocess
import time

from conftest import RedisServer, RespClient, RedisError, _decode, free_cluster_port, tail

NODE_ARGS = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"]


class RedisCluster:
    def __init__(self, directory, masters=3, replicas=1, tls=None):
        self.dir = directory
        self.nmasters = masters
        self.replicas = replicas
        self.tls = tls
        self.tls_ports = []
        self.nodes = [RedisServer(directory / f"node{i}", NODE_ARGS)
                      for i in range(masters * (1 + replicas))]

    # -- lifecycle
    def start(self, timeout=60.0):
        cli = []
        for n in self.nodes:
            if self.tls:
                self.tls_ports.append(free_cluster_port())  # with tls-cluster the bus is this + 10000
                n.extra_args += ["--tls-port", str(self.tls_ports[-1]), "--tls-cluster", "yes",
                                 "--tls-replication", "yes", "--tls-auth-clients", "no",
                                 "--tls-cert-file", self.tls["cert"], "--tls-key-file", self.tls["key"],
                                 "--tls-ca-cert-file", self.tls["ca"]]
            self._start_node(n)
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        if self.tls:
            addrs = [f"127.0.0.1:{p}" for p in self.tls_ports]
            cli = ["--tls", "--cacert", self.tls["ca"]]
        out = subprocess.run(["redis-cli", *cli, "--cluster", "create", *addrs,
                              "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                             capture_output=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout[-2000:]!r}")
        self.wait_ok(timeout)
        return self

    @staticmethod
    def _start_node(n, attempts=5):
        """Starts node n on a free cluster port, on another one if a parallel
        run bound that port (or its bus port) between the check and the bind."""
        for i in range(attempts):
            try:
                return n.start(port=free_cluster_port())
            except RuntimeError:
                if i == attempts - 1 or "Address already in use" not in tail(n.log, 5):
                    raise

    def wait_ok(self, timeout=60.0):
        """Until every live node says cluster_state:ok and knows every
        master, and every replica's link to its master is up."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                if all(self._node_ok(n) for n in self.nodes if n.alive()):
                    return
            except (OSError, RedisError) as e:
                last = str(e)
            time.sleep(0.1)
        raise RuntimeError(f"cluster not ok within {timeout} s {last}")

    def _node_ok(self, n):
        info = n.cmd("CLUSTER", "INFO")
        if "cluster_state:ok" not in info:
            return False
        role = n.cmd("INFO", "replication")
        return "role:master" in role or "master_link_status:up" in role

    def stop(self):
        for n in self.nodes:
            n.stop()

    # -- what a client sees
    @property
    def url(self):
        seeds = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:2])
        return f"redis+cluster://{seeds}"

    @property
    def tls_url(self):
        seeds = ",".join(f"127.0.0.1:{p}" for p in self.tls_ports[:2])
        return f"rediss+cluster://{seeds}"

    def slot_map(self):
        """{slot: port of its master} from CLUSTER SLOTS of a live node."""
        for n in self.nodes:
            if not n.alive():
                continue
            try:
                ranges = n.cmd("CLUSTER", "SLOTS")
            except (OSError, RedisError):
                continue
            out = {}
            for r in ranges:
                for s in range(int(r[0]), int(r[1]) + 1):
                    out[s] = int(r[2][1])
            return out
        raise RuntimeError("no live node")

    def masters(self):
        """The RedisServers that are masters now."""
        ports = set(self.slot_map().values())
        return [n for n in self.nodes if n.port in ports and n.alive()]

    def node(self, port):
        return next(n for n in self.nodes if n.port == port)

    def port_for(self, key):
        """The port of the master that serves key's slot."""
        any_node = next(n for n in self.nodes if n.alive())
        return self.slot_map()[int(any_node.cmd("CLUSTER", "KEYSLOT", key))]

    def cmd(self, *args):
        """One command on the master of args[1]'s slot (a key command)."""
        return self.node(self.port_for(args[1])).cmd(*args)

    def keys(self, pattern="*"):
        found = set()
        for m in self.masters():
            found |= m.keys(pattern)
        return found

    def crossslot_errors(self):
        """CROSSSLOT errors Redis answered, over every live node since it started."""
        total = 0
        for n in self.nodes:
            if not n.alive():
                continue
            for line in n.cmd("INFO", "errorstats").splitlines():
                if line.startswith("errorstat_CROSSSLOT:"):
                    total += int(line.split("count=")[1].split(",")[0])
        return total


def running_cluster(directory):
    """A started RedisCluster for a fixture to yield; stopped when the
    fixture ends (also when the start failed halfway)."""
    c = RedisCluster(directory)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def cluster_cli(*args, timeout=120):
    out = subprocess.run(["redis-cli", *args], capture_output=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"redis-cli {' '.join(args[:3])} failed: {out.stdout[-2000:]!r} {out.stderr[-500:]!r}")
    return _decode(out.stdout)


__all__ = ["RedisCluster", "cluster_cli", "RespClient"]


class RedisSentinels:
    """One master, `replicas` replicas and `sentinels` Redis Sentinels (quorum
    2) on loopback ports, each a process started here and stopped by pid.
    Sentinels take a master silent for 1 s as down and fail over."""

    def __init__(self, directory, name="hwmaster", replicas=1, sentinels=3):
        self.dir = directory
        self.name = name
        self.master = RedisServer(directory / "master")
        self.replicas = [RedisServer(directory / f"replica{i}") for i in range(replicas)]
        self.sentinels = [RedisServer(directory / f"sentinel{i}") for i in range(sentinels)]
        self.master_port = None

    def start(self, timeout=30.0):
        self.master.start()
        self.master_port = self.master.port
        for r in self.replicas:
            r.extra_args = ["--replicaof", "127.0.0.1", str(self.master.port)]
            r.start()
        for s in self.sentinels:
            s.start_sentinel = True
            self._start_sentinel(s)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.master.cmd("INFO", "replication")
            if f"connected_slaves:{len(self.replicas)}" in info and all(
                    self.sentinel_master(s) == self.master.port for s in self.sentinels):
                return self
            time.sleep(0.1)
        raise RuntimeError("sentinels or replicas not ready")

    def _start_sentinel(self, s):
        from conftest import free_port, REDIS_SERVER
        s.port = free_port()
        conf = s.dir / "sentinel.conf"
        conf.write_text(f"port {s.port}\nbind 127.0.0.1\ndir {s.dir}\n"
                        f"sentinel monitor {self.name} 127.0.0.1 {self.master.port} 2\n"
                        f"sentinel down-after-milliseconds {self.name} 1000\n"
                        f"sentinel failover-timeout {self.name} 5000\n")
        s._logf = open(s.log, "ab")
        s.proc = subprocess.Popen([REDIS_SERVER, str(conf), "--sentinel"], stdout=s._logf,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(s.dir))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with RespClient(s.port, timeout=1.0) as c:
                    if c.call("PING") == "PONG":
                        return
            except (OSError, RedisError):
                pass
            time.sleep(0.05)
        raise RuntimeError("sentinel did not start")

    def sentinel_master(self, s):
        try:
            addr = s.cmd("SENTINEL", "get-master-addr-by-name", self.name)
        except (OSError, RedisError):
            return None
        return int(addr[1]) if isinstance(addr, list) and len(addr) == 2 else None

    @property
    def url(self):
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels) + f"/{self.name}"

    def servers(self):
        return [self.master, *self.replicas]

    def current_master(self):
        """The data node that says ROLE master and that the sentinels name."""
        ports = {self.sentinel_master(s) for s in self.sentinels if s.alive()}
        for n in self.servers():
            if n.alive() and n.port in ports and n.cmd("ROLE")[0] == "master":
                return n
        return None

    def stop(self):
        for s in self.sentinels:
            s.stop()
        for n in self.servers():
            n.stop()


class CreateStream:
    """Creates timers through hw as fast as two keep-alive connections go,
    until stop(): acked (2xx), refused (503) and errors (anything else,
    or a cut connection) by id, so a test can check what was acknowledged."""

    def __init__(self, hw, url, prefix, delay_ms=3000, connections=2):
        import threading
        self.hw, self.url, self.prefix, self.delay_ms = hw, url, prefix, delay_ms
        self.acked, self.refused, self.errors = [], [], []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k, connections)) for k in range(connections)]
        for t in self._threads:
            t.start()

    def _run(self, k, step):
        with self.hw.api.session() as s:
            while not self._stop.is_set():
                tid = f"{self.prefix}-{k:06d}"
                k += step
                try:
                    status, _, body = s.request("POST", "/timers", json_body={"id": tid, "url": self.url,
                                                                               "delay_ms": self.delay_ms})
                except OSError as e:  # the outcome is unknown: not acknowledged
                    self.errors.append((tid, repr(e)))
                    continue
                if status in (200, 201):
                    self.acked.append(tid)
                elif status == 503:
                    self.refused.append(tid)
                else:
                    self.errors.append((tid, status, body))

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

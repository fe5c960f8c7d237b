"""The deployment files agree with each other and with the code, without a
Docker engine: docker-compose (Debian's 1.29) accepts docker/docker-compose.yml;
the compose file, docker/Dockerfile, docker/nginx.conf, docker/redis.conf and
the README name the same ports, variables and volumes; every variable they
set is a real hookwheel setting (`hookwheel --help`); the image's runtime
packages hold every library the binary links; the build stage has the -dev
package of every pkg-config module the Makefile uses and copies enough of the
tree for `make build/hookwheel`; and nothing secret is written into them."""

import copy
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import (HOOKWHEEL_BIN, REDIS_SERVER, RespClient, free_port, stop_process,
                      wait_until)

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILE = "docker/docker-compose.yml"
PROJECT = "hookwheel"
# What the README tells operators to run, from the repository root.
COMPOSE_CMD = f"docker compose -f {COMPOSE_FILE} -p {PROJECT}"
SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "PASS", "KEY")
# Libraries of the sanitizer builds, which the image never has.
SANITIZER_LIBS = ("libasan", "libubsan", "libtsan", "liblsan")


def hookwheel_settings():
    """{HOOKWHEEL_X: default} from `hookwheel --help`."""
    out = subprocess.run([HOOKWHEEL_BIN, "--help"], capture_output=True, text=True, check=True).stdout
    rows = re.findall(r"^  --[a-z-]+\s+(HOOKWHEEL_[A-Z_]+)\s+default: (.*)$", out, re.M)
    assert len(rows) > 20, out
    return {env: default.strip() for env, default in rows}


def compose_config():
    """`docker-compose config` of the compose file, parsed; run as the README
    says (from the repository root, project hookwheel) with a bare
    environment, so no variable of this shell leaks in."""
    return copy.deepcopy(_compose_config())


@functools.lru_cache(maxsize=4)
def _compose_config(path=COMPOSE_FILE):
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is not installed (Debian package docker-compose: make deps)"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    r = subprocess.run([exe, "-f", path, "-p", PROJECT, "config"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"docker-compose config failed:\n{r.stderr}"
    return yaml.safe_load(r.stdout)


def dockerfile_stages():
    """[(FROM line, [instructions with continuations joined])] per stage."""
    text = (DOCKER / "Dockerfile").read_text()
    text = re.sub(r"\\\n\s*(#[^\n]*\n\s*)*", " ", text)
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append((line, []))
        elif stages:
            stages[-1][1].append(line)
    return stages


def instructions(stage, keyword):
    return [i[len(keyword):].strip() for i in stage[1] if i.upper().startswith(keyword + " ")]


def apt_packages(stage):
    pkgs = []
    for run in instructions(stage, "RUN"):
        for m in re.finditer(r"apt-get install((?:\s+[^\s&|;]+)+)", run):
            pkgs += [p for p in m.group(1).split() if not p.startswith("-")]
    return pkgs


def nginx_conf():
    return (DOCKER / "nginx.conf").read_text()


def readme_deploy_sections():
    text = (ROOT / "README.md").read_text()
    headings = [(m.start(), m.group(1)) for m in re.finditer(r"^## (.+)$", text, re.M)]
    sections = {}
    for i, (start, title) in enumerate(headings):
        end = headings[i + 1][0] if i + 1 < len(headings) else len(text)
        sections[title.strip()] = text[start:end]
    return [t for _, t in headings], sections


def size_bytes(value):
    m = re.fullmatch(r"(\d+)([kKmM]?)", value)
    assert m, value
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]


def seconds(value):
    m = re.fullmatch(r"(\d+)(ms|s|m)?", str(value))
    assert m, value
    return int(m.group(1)) * {"ms": 0.001, "s": 1, None: 1, "m": 60}[m.group(2)]


# --------------------------------------------------------------------------


def test_docker_compose_accepts_the_file_with_the_services_the_issue_asks_for():
    cfg = compose_config()
    services = cfg["services"]
    assert set(services) == {"redis", "hookwheel", "nginx"}, set(services)
    hw, redis, nginx = services["hookwheel"], services["redis"], services["nginx"]
    assert hw["deploy"]["replicas"] == 2
    assert hw["depends_on"]["redis"]["condition"] == "service_healthy"
    assert nginx["depends_on"]["hookwheel"]["condition"] == "service_healthy"
    assert "healthcheck" in redis and "ping" in " ".join(redis["healthcheck"]["test"])
    # hookwheel is configured only through its environment, reachable only
    # through nginx, and builds from docker/Dockerfile
    assert not {"command", "entrypoint", "ports", "container_name"} & set(hw), sorted(hw)
    assert hw["build"]["dockerfile"] == "docker/Dockerfile"
    assert Path(hw["build"]["context"]).resolve() == ROOT
    assert "ports" not in redis
    assert [(p["published"], p["target"]) for p in nginx["ports"]] == [(8080, 8080)]
    assert list(cfg["volumes"]) == ["redis-data"]
    mounts = {v.split(":")[0]: v.split(":")[1] for v in redis["volumes"]}
    assert mounts["redis-data"] == "/data", mounts


def test_ports_agree_across_compose_dockerfile_nginx_conf_and_readme():
    cfg = compose_config()
    hw_env = cfg["services"]["hookwheel"]["environment"]
    listen_port = int(hw_env["HOOKWHEEL_LISTEN"].rsplit(":", 1)[1])
    assert hw_env["HOOKWHEEL_LISTEN"].startswith("0.0.0.0:"), hw_env["HOOKWHEEL_LISTEN"]
    assert [int(p) for p in cfg["services"]["hookwheel"]["expose"]] == [listen_port]

    final = dockerfile_stages()[-1]
    assert instructions(final, "EXPOSE") == [str(listen_port)]
    env = " ".join(instructions(final, "ENV"))
    assert f"HOOKWHEEL_LISTEN=0.0.0.0:{listen_port}" in env, env

    conf = nginx_conf()
    upstream = re.search(r"server\s+hookwheel:(\d+)\b[^;]*;\s*# test:upstream", conf)
    assert upstream and int(upstream.group(1)) == listen_port
    nginx_listen = re.search(r"listen\s+(\d+)\s*;\s*# test:listen", conf)
    published = cfg["services"]["nginx"]["ports"][0]
    assert nginx_listen and int(nginx_listen.group(1)) == published["target"]

    redis_port = int(re.search(r"^port\s+(\d+)", (DOCKER / "redis.conf").read_text(), re.M).group(1))
    assert hw_env["HOOKWHEEL_REDIS_URL"] == f"redis://redis:{redis_port}/0"

    _, sections = readme_deploy_sections()
    deploy = sections["Deploy with docker compose"]
    assert f"{published['published']}" in deploy and f"localhost:{published['published']}" in deploy


def test_every_variable_named_is_a_real_setting_and_compose_dockerfile_and_readme_agree():
    settings = hookwheel_settings()
    cfg = compose_config()
    compose_vars = set(cfg["services"]["hookwheel"]["environment"])
    final = dockerfile_stages()[-1]
    docker_vars = set(re.findall(r"\b(HOOKWHEEL_[A-Z_]+)=", " ".join(instructions(final, "ENV"))))
    _, sections = readme_deploy_sections()
    deploy = sections["Deploy with docker compose"] + sections["Running behind your own nginx"]
    readme_vars = set(re.findall(r"\b(HOOKWHEEL_[A-Z_]+)\b", deploy))
    raw_compose = (DOCKER / "docker-compose.yml").read_text()
    for name, found in (("docker-compose.yml", compose_vars | set(re.findall(r"\b(HOOKWHEEL_[A-Z_]+)\b", raw_compose))),
                        ("Dockerfile", docker_vars), ("README deploy sections", readme_vars)):
        unknown = sorted(found - set(settings))
        assert not unknown, f"{name} names settings hookwheel does not have: {unknown}"
    assert compose_vars <= readme_vars, f"not in the README: {sorted(compose_vars - readme_vars)}"
    assert docker_vars <= readme_vars, f"not in the README: {sorted(docker_vars - readme_vars)}"
    assert "HOOKWHEEL_DESTINATION_ALLOWLIST" in compose_vars  # documented in the compose file
    assert "HOOKWHEEL_INSTANCE_ID" not in compose_vars  # replicas would share it


def test_volumes_and_redis_persistence_agree_across_compose_redis_conf_and_readme():
    cfg = compose_config()
    redis = cfg["services"]["redis"]
    conf = (DOCKER / "redis.conf").read_text()
    directives = dict(re.findall(r"^(\w[\w-]*)\s+(.+?)\s*$", conf, re.M))
    assert directives["appendonly"] == "yes"
    assert directives["appendfsync"] == "everysec"
    assert directives["maxmemory-policy"] == "noeviction"
    mounts = dict(v.split(":")[:2] for v in redis["volumes"])
    assert mounts["redis-data"] == directives["dir"]
    conf_mount = [target for src, target in mounts.items() if src.endswith("docker/redis.conf")]
    assert conf_mount and conf_mount[0] in redis["command"], (mounts, redis["command"])
    final = dockerfile_stages()[-1]
    assert not instructions(final, "VOLUME"), "hookwheel's image keeps no data of its own"
    _, sections = readme_deploy_sections()
    deploy = sections["Deploy with docker compose"]
    for volume in cfg["volumes"]:
        assert f"{PROJECT}_{volume}" in deploy, f"README does not name the volume {PROJECT}_{volume}"
    assert directives["appenddirname"].strip('"') in deploy


def test_nginx_limits_and_timeouts_match_hookwheel():
    settings = hookwheel_settings()
    cfg = compose_config()
    env = cfg["services"]["hookwheel"]["environment"]
    conf = nginx_conf()
    body_cap = int(env.get("HOOKWHEEL_MAX_BODY_BYTES", settings["HOOKWHEEL_MAX_BODY_BYTES"]))
    assert size_bytes(re.search(r"client_max_body_size\s+(\S+);", conf).group(1)) == body_cap
    assert size_bytes(re.search(r"client_body_buffer_size\s+(\S+);", conf).group(1)) >= body_cap
    # the 413's detail names the cap of the request's path
    assert "larger than $hw_body_cap bytes" in conf
    cap_map = re.search(r"map \$uri \$hw_body_cap \{(.*?)\}", conf, re.S).group(1)
    caps = dict(re.findall(r"^\s*(\S+)\s+(\d+);$", cap_map, re.M))
    batch_cap = int(env.get("HOOKWHEEL_MAX_BATCH_BODY_BYTES", settings["HOOKWHEEL_MAX_BATCH_BODY_BYTES"]))
    batch_location = re.search(r"location = /timers/batch \{(.*?)\}", conf, re.S).group(1)
    assert size_bytes(re.search(r"client_max_body_size\s+(\S+);", batch_location).group(1)) == batch_cap
    assert caps == {"/timers/batch": str(batch_cap), "default": str(body_cap)}, caps
    idle = int(env.get("HOOKWHEEL_CONNECTION_TIMEOUT_S", settings["HOOKWHEEL_CONNECTION_TIMEOUT_S"]))
    assert seconds(re.search(r"keepalive_timeout\s+(\S+);", conf).group(1)) < idle
    # retries: connection errors and timeouts only, never a sent POST
    nexts = re.findall(r"proxy_next_upstream\s+([^;]+);", conf)
    assert nexts == ["error timeout"], nexts
    assert "non_idempotent" not in conf.replace("`non_idempotent`", "")
    grace_ms = int(env.get("HOOKWHEEL_SHUTDOWN_GRACE_MS", settings["HOOKWHEEL_SHUTDOWN_GRACE_MS"]))
    assert seconds(cfg["services"]["hookwheel"]["stop_grace_period"]) > grace_ms / 1000


def test_the_runtime_image_has_every_library_the_binary_links():
    binary = ROOT / "build" / "hookwheel"
    binary = binary if binary.exists() else Path(HOOKWHEEL_BIN)
    out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
    needed = [n for n in re.findall(r"\(NEEDED\).*\[(.+)\]", out) if not n.startswith(SANITIZER_LIBS)]
    assert "libcurl.so.4" in needed, needed
    runtime = set(apt_packages(dockerfile_stages()[-1]))
    base = {"libc6"}  # in debian:bookworm-slim
    for lib in needed:
        r = subprocess.run(["dpkg", "-S", f"*/{lib}"], capture_output=True, text=True)
        owners = {line.split(":")[0] for line in r.stdout.splitlines() if line}
        assert owners, f"no Debian package holds {lib}"
        assert owners & (runtime | base), f"{lib} comes from {owners}, not in the runtime stage {sorted(runtime)}"
    assert {"ca-certificates", "curl"} <= runtime  # HTTPS targets; the HEALTHCHECK
    dev = [p for p in runtime if p.endswith("-dev") or p in ("build-essential", "pkg-config", "gcc")]
    assert not dev, f"build tools in the runtime stage: {dev}"


def test_the_build_stage_has_the_dev_packages_and_copies_enough_to_build(tmp_path):
    stages = dockerfile_stages()
    assert len(stages) == 2
    # the base images are build arguments whose defaults are Debian's
    text = (DOCKER / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)\s*$", text, re.M))
    assert re.fullmatch(r"FROM \$\{DEBIAN_IMAGE\} AS build", stages[0][0], re.I), stages[0][0]
    assert stages[1][0] == "FROM ${DEBIAN_SLIM_IMAGE}", stages[1][0]
    assert args["DEBIAN_IMAGE"] == "debian:bookworm" and args["DEBIAN_SLIM_IMAGE"] == "debian:bookworm-slim", args
    build_pkgs = set(apt_packages(stages[0]))
    makefile = (ROOT / "Makefile").read_text()
    modules = re.search(r"^PKGS\s*:=\s*(.+)$", makefile, re.M).group(1).split()
    for module in modules:
        pcdir = subprocess.run(["pkg-config", "--variable=pcfiledir", module], capture_output=True,
                               text=True, check=True).stdout.strip()
        owner = subprocess.run(["dpkg", "-S", f"{pcdir}/{module}.pc"], capture_output=True,
                               text=True, check=True).stdout.split(":")[0]
        assert owner in build_pkgs, f"{module}.pc comes from {owner}, not installed in the build stage"
    # the sources the build stage copies (into WORKDIR) are enough for its make
    assert instructions(stages[0], "WORKDIR") == ["/src"]
    for copy in instructions(stages[0], "COPY"):
        *sources, dest = copy.split()
        for src in sources:
            origin = ROOT / src
            if origin.is_dir():  # a directory's contents go into dest
                shutil.copytree(origin, tmp_path / dest, dirs_exist_ok=True)
            elif dest.endswith("/"):
                (tmp_path / dest).mkdir(parents=True, exist_ok=True)
                shutil.copy(origin, tmp_path / dest / origin.name)
            else:
                shutil.copy(origin, tmp_path / dest)
    make_cmd = [r for r in instructions(stages[0], "RUN") if r.startswith("make ")]
    assert make_cmd, "the build stage runs no make"
    goals = re.search(r"make\s+(?:-\S+\s+)*((?:build/\S+\s*)+)", make_cmd[0]).group(1).split()
    assert goals == ["build/hookwheel", "build/hookwheelctl"], goals  # the service and its client
    # as a fresh shell would run it: not with the variables of a make that runs
    # this test (make test-sanitize passes SANITIZER=... down through MAKEFLAGS)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "SANITIZER", "BUILD", "OPT")}
    r = subprocess.run(["make", "-n", *goals], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, f"make -n {goals} with only the copied files:\n{r.stderr[-2000:]}"
    assert "ui/index.html" in r.stdout, "the image's binary would have no dashboard"
    final = stages[1]
    copies = [f"COPY {c}" for c in instructions(final, "COPY")]
    assert "COPY --from=build /src/build/hookwheel /usr/local/bin/hookwheel" in copies
    assert "COPY --from=build /src/build/hookwheelctl /usr/local/bin/hookwheelctl" in copies


def test_the_image_runs_as_an_unprivileged_user_with_a_health_check_and_no_secrets():
    final = dockerfile_stages()[-1]
    users = instructions(final, "USER")
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    health = instructions(final, "HEALTHCHECK")
    assert health and "/healthz" in health[0], health
    text = (DOCKER / "Dockerfile").read_text()
    for line in re.findall(r"^\s*(?:ENV|ARG)\s+(.+)$", text, re.M):
        assert not any(w in line.upper() for w in SECRET_WORDS), f"a secret in the image: {line}"
    cfg = compose_config()
    raw = (DOCKER / "docker-compose.yml").read_text()
    for name in cfg["services"]["hookwheel"]["environment"]:
        if any(w in name for w in SECRET_WORDS):
            assert re.search(rf"^\s*{name}:\s*\"?\$\{{{name}(:-)?\}}\"?\s*$", raw, re.M), (
                f"{name} must come from the environment (${{{name}:-}}), not be written in the file")
    assert "requirepass" not in re.sub(r"#[^\n]*", "", (DOCKER / "redis.conf").read_text())


def test_the_readme_documents_deploying_and_running_behind_your_own_nginx():
    titles, sections = readme_deploy_sections()
    assert "Deploy with docker compose" in titles and "Running behind your own nginx" in titles
    assert titles.index("Deploy with docker compose") < titles.index("Configuration")
    assert titles.index("Running behind your own nginx") < titles.index("Configuration")
    deploy = sections["Deploy with docker compose"]
    for needle in (f"{COMPOSE_CMD} up -d --build", "--scale hookwheel=", "`resolve`",
                   "auto-aof-rewrite-percentage", "docker-compose.yml", "redis.conf", "nginx.conf"):
        assert needle in deploy, f"the deploy section does not mention {needle!r}"
    behind = sections["Running behind your own nginx"]
    for needle in ("docker/nginx.conf", "proxy_next_upstream", "client_max_body_size",
                   "X-Request-Id", "/metrics"):
        assert needle in behind, f"the nginx section does not mention {needle!r}"


def test_redis_server_accepts_docker_redis_conf(tmp_path):
    """The real redis-server starts with docker/redis.conf (only its data
    directory, port and bind address changed) and has AOF on."""
    port = free_port()
    original = (DOCKER / "redis.conf").read_text()
    conf = re.sub(r"^dir /data$", f"dir {tmp_path}", original, flags=re.M)
    assert len(set(conf.splitlines()) ^ set(original.splitlines())) == 2  # that line only
    (tmp_path / "redis.conf").write_text(conf)
    proc = subprocess.Popen(
        [REDIS_SERVER, str(tmp_path / "redis.conf"), "--port", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(tmp_path))
    try:
        def up():
            try:
                with RespClient(port, timeout=0.5) as c:
                    return c.call("PING") == "PONG"
            except OSError:
                return proc.poll() is not None
        assert wait_until(up, timeout=10), "redis-server did not answer"
        assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
        with RespClient(port) as c:
            for name, want in (("appendonly", b"yes"), ("appendfsync", b"everysec"),
                               ("maxmemory-policy", b"noeviction"), ("save", b"")):
                assert c.call("CONFIG", "GET", name)[1] == want, name
            c.call("SET", "k", "v")
        assert wait_until(lambda: (tmp_path / "appendonlydir").is_dir(), timeout=5)
    finally:
        stop_process(proc, timeout=10)


def test_the_sentinel_and_cluster_compose_files_are_valid_and_name_real_settings():
    """The scale-out examples of README "Scaling out": docker-compose accepts
    them, hookwheel's settings there exist, and each points hookwheel at its
    kind of Redis with replica acknowledgements on."""
    settings = set(hookwheel_settings())
    readme = (ROOT / "README.md").read_text()
    for path, scheme in (("docker/docker-compose.sentinel.yml", "redis+sentinel://"),
                         ("docker/docker-compose.cluster.yml", "redis+cluster://")):
        cfg = copy.deepcopy(_compose_config(path))
        hw = cfg["services"]["hookwheel"]
        env = hw["environment"]
        assert not sorted(set(env) - settings), (path, sorted(set(env) - settings))
        assert env["HOOKWHEEL_REDIS_URL"].startswith(scheme), env["HOOKWHEEL_REDIS_URL"]
        assert env["HOOKWHEEL_REDIS_MIN_REPLICAS_ACK"] == "1"
        assert hw["deploy"]["replicas"] == 2 and "ports" not in hw
        assert path.split("/")[1] in readme, f"{path} is not in the README"
    sentinel = _compose_config("docker/docker-compose.sentinel.yml")["services"]
    assert sum(1 for n in sentinel if n.startswith("sentinel-")) == 3
    assert "--replicaof" in sentinel["redis-replica"]["command"]
    cluster = _compose_config("docker/docker-compose.cluster.yml")["services"]
    nodes = [n for n in cluster if n.startswith("redis-")]
    assert len(nodes) == 6
    init = " ".join(cluster["cluster-init"]["command"])
    assert init.count(":6379") == 6 and "--cluster-replicas 1" in init
    assert int(cluster["hookwheel"]["environment"]["HOOKWHEEL_PARTITIONS"]) >= 64

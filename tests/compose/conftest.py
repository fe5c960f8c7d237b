"""Fixtures of the compose tests (stacks.py has the helpers)."""
import subprocess

import pytest

import stacks


@pytest.fixture(scope="session")
def images():
    """The images, made once; every test skips when no engine can make them
    (no engine, or no base image can be made offline here). The engine and
    the base images there, docker/Dockerfile must build: a failure is the
    project's (the Dockerfile, or its build context), not the machine's."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker engine answers (tests/compose/run.sh starts one as root)")
    made = subprocess.run([str(stacks.HERE / "images.sh")], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"the base images could not be made offline:\n{made.stderr[-2000:]}")
    build = stacks.Stack("build", "docker-compose.yml", "compose.test.yml").compose("build", check=False)
    if build.returncode != 0:
        pytest.fail(f"docker/Dockerfile did not build:\n{build.stdout[-3000:]}\n{build.stderr[-2000:]}")


def bring_up(label, name, overlay):
    stack = stacks.Stack(label, name, overlay)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


# Each module brings its stack up for its tests and down after them.
@pytest.fixture(scope="module")
def stack(images):
    yield from bring_up("one", "docker-compose.yml", "compose.test.yml")


@pytest.fixture(scope="module")
def sentinel_stack(images):
    yield from bring_up("sentinel", "docker-compose.sentinel.yml", "compose.sentinel.test.yml")


@pytest.fixture(scope="module")
def cluster_stack(images):
    yield from bring_up("cluster", "docker-compose.cluster.yml", "compose.cluster.test.yml")

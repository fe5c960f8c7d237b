#!/usr/bin/env bash
# Makes the images the compose test needs without a registry, from Debian's
# packages: bookworm from debootstrap (docker import) as the base of
# docker/Dockerfile and of a Redis 7.0 image (Debian's redis-server) standing
# in for redis:7.0-bookworm, and an nginx 1.27.3+ image standing in for
# nginx:1.28-bookworm (docker/nginx.conf's `resolve` needs 1.27.3; bookworm
# has 1.22, Debian testing has a newer one). Images already made are kept.
set -euo pipefail
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# debootstrap_import IMAGE SUITE [debootstrap options]
debootstrap_import() {
  local image=$1 suite=$2 root log
  shift 2
  docker image inspect "$image" >/dev/null 2>&1 && return 0
  root=$(mktemp -d)
  log=$(mktemp)
  # The sid script bootstraps testing too (older debootstraps lack its name).
  if ! debootstrap --variant=minbase "$@" "$suite" "$root" "$mirror" \
       /usr/share/debootstrap/scripts/sid >"$log" 2>&1; then
    tail -20 "$log" >&2
    rm -rf "$root" "$log"
    return 1
  fi
  tar -C "$root" -c . | docker import - "$image" >/dev/null
  rm -rf "$root" "$log"
}

debootstrap_import hookwheel-test/debian:bookworm bookworm
debootstrap_import hookwheel-test/nginx:testing testing --include=nginx-light

if ! docker image inspect hookwheel-test/redis:bookworm >/dev/null 2>&1; then
  docker build -q -t hookwheel-test/redis:bookworm - >/dev/null <<'DOCKERFILE'
FROM hookwheel-test/debian:bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data /usr/local/etc/redis && chown redis:redis /data
WORKDIR /data
DOCKERFILE
fi

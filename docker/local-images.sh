#!/usr/bin/env bash
# Builds, from Debian packages, the images docker-compose.yml needs on a machine that reaches
# no image registry (CI): a Debian base with Python, the lab image on it with Python packages
# from a wheelhouse made on this host, Prometheus from Debian's `prometheus` package and
# Alertmanager from its `prometheus-alertmanager`.
# Prints the variables that point compose at them. A normal Docker host does not need this:
# `docker compose up` pulls the standard images named in .env.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=stormlab-local/debian-python:bookworm
PROMETHEUS=stormlab-local/prometheus:debian
ALERTMANAGER=stormlab-local/alertmanager:debian
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PIP=${PIP:-.venv/bin/pip}
say() { echo "local-images: $*" >&2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# (Re)built when missing or when it lacks a tool the chaos backend runs in the containers.
if ! docker image inspect "$BASE" >/dev/null 2>&1 \
  || ! docker run --rm --pull never "$BASE" sh -c 'command -v iptables && command -v pgrep && command -v tc' >/dev/null 2>&1; then
  say "debootstrap bookworm with python3, iptables, procps and iproute2 (about a minute)"
  debootstrap --variant=minbase --include=python3,python3-venv,iptables,procps,iproute2,wget,ca-certificates \
    bookworm "$work/root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  tar -C "$work/root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  rm -rf "$work/root"
fi

say "wheelhouse for the lab image"
"$PIP" wheel --quiet -c constraints.txt -w docker/wheelhouse 'setuptools>=68' wheel '.[docker]'
rm -f docker/wheelhouse/stormlab-*.whl

if ! docker image inspect "$PROMETHEUS" >/dev/null 2>&1; then
  say "prometheus image from Debian's package"
  command -v prometheus >/dev/null || { apt-get update -qq && apt-get install -y -qq prometheus >/dev/null; }
  cp "$(command -v prometheus)" "$(command -v promtool)" "$work/"
  cat >"$work/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY prometheus promtool /bin/
RUN mkdir -p /prometheus /etc/prometheus && chown 65534:65534 /prometheus
USER 65534
WORKDIR /prometheus
ENTRYPOINT ["/bin/prometheus"]
DOCKERFILE
  docker build --quiet -t "$PROMETHEUS" "$work" >/dev/null
fi

if ! docker image inspect "$ALERTMANAGER" >/dev/null 2>&1; then
  say "alertmanager image from Debian's package"
  command -v prometheus-alertmanager >/dev/null || { apt-get update -qq && apt-get install -y -qq prometheus-alertmanager >/dev/null; }
  mkdir -p "$work/am"
  cp "$(command -v prometheus-alertmanager)" "$work/am/alertmanager"
  cp "$(command -v amtool)" "$work/am/"
  cp -r /usr/share/prometheus/alertmanager "$work/am/share"  # Debian's build reads its templates there
  cat >"$work/am/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY alertmanager amtool /bin/
COPY share /usr/share/prometheus/alertmanager
RUN mkdir -p /alertmanager && chown 65534:65534 /alertmanager
USER 65534
WORKDIR /alertmanager
ENTRYPOINT ["/bin/alertmanager"]
DOCKERFILE
  docker build --quiet -t "$ALERTMANAGER" "$work/am" >/dev/null
fi

cat <<VARS
export STORMLAB_BASE_IMAGE=$BASE
export PROMETHEUS_IMAGE=$PROMETHEUS
export ALERTMANAGER_IMAGE=$ALERTMANAGER
VARS

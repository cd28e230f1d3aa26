#!/usr/bin/env bash
# A swarm of several Docker engines on one host, as CI runs it (no second machine, no registry).
# Each engine is a dockerd of its own (Debian's docker.io, the host's) in a network namespace of
# its own, with its own data root, sockets and cgroup parent: a host of its own as far as the
# network goes (its own address, iptables, bridges and overlay endpoints), the engines reaching
# each other over a bridge on this host. They are joined into one swarm (the first is the
# manager) and each is given the lab's images (docker save | docker load: a swarm's nodes pull
# from a registry, which this host may not have).
#
#   docker/swarm-engines.sh up [N]   N engines (default 3); prints `export DOCKER_HOST=...` for
#                                    the manager: eval it, then deploy the stack as usual
#   docker/swarm-engines.sh down     the engines stopped (by their pids), their namespaces,
#                                    links, data and the one forwarding rule removed
#
# Each engine answers on tcp://ADDRESS:2375 on that bridge, without TLS: a private bridge on one
# host, never routed anywhere else. Each node carries the label stormlab.engine=tcp://ADDRESS:2375,
# which the chaos tool reads to act through the engine that runs each target task.
# Why not Docker-in-Docker: a privileged container needs every capability, and a host (or a VM)
# that withholds one (CAP_SYS_RESOURCE here) refuses it; a namespace needs none of that.
# The images given to the engines: $STORMLAB_IMAGE (stormlab:0.1.0), $PROMETHEUS_IMAGE and
# $ALERTMANAGER_IMAGE (from docker/local-images.sh on a host without a registry);
# $STORMLAB_ENGINE_IMAGES adds more. The engines reach this host at the bridge's address, .1
# (`export STORMLAB_DESK_ADDR=...` printed by `up`: where the stack's Alertmanager finds the desk).
# Needs root, iproute2, nsenter and the host's dockerd running (its images are copied).
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX=${STORMLAB_ENGINES_PREFIX:-172.31.213}  # the bridge is .1, engine N is .(10+N)
BRIDGE=stormlab-br
TAG=stormlab-engines  # the forwarding rule's comment: how `down` finds it
DATA=${STORMLAB_ENGINES_DATA:-/var/lib/stormlab-engines}
RUN=/run/stormlab-engines
say() { echo "swarm-engines: $*" >&2; }

address() { echo "$PREFIX.$((10 + $1))"; }
url() { echo "tcp://$(address "$1"):2375"; }

down() {
  local dir pid pids=()
  for dir in "$RUN"/engine-*; do  # every engine told to stop first, then each waited for
    [ -d "$dir" ] || continue
    pid=$(cat "$dir/dockerd.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      say "stopping $(basename "$dir") (dockerd pid $pid)"
      kill -TERM "$pid"
      pids+=("$pid")
    fi
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  done
  # what a stopped engine may leave mounted (its sandboxes' namespaces, its layers), deepest first
  awk -v run="$RUN/" -v data="$DATA/" 'index($2, run) == 1 || index($2, data) == 1 {print $2}' /proc/mounts | sort -r |
    while read -r mount; do umount -l "$mount" 2>/dev/null || true; done
  for dir in "$RUN"/engine-*; do
    [ -d "$dir" ] || continue
    ip netns del "stormlab-${dir##*/}" 2>/dev/null || true
    rm -rf "$dir"
  done
  for link in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  while iptables -w -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$TAG" -j ACCEPT 2>/dev/null; do :; done
  rm -rf "$DATA"
  rmdir "$RUN" 2>/dev/null || true
}

wait_engine() {
  local i=$1
  for _ in $(seq 60); do
    docker -H "$(url "$i")" info >/dev/null 2>&1 && return 0
    sleep 1
  done
  say "engine $i did not answer in 60 s; its log:"
  tail -20 "$RUN/engine-$i/dockerd.log" >&2 || true
  return 1
}

start_engine() {
  local i=$1 ns="stormlab-engine-$1" dir="$RUN/engine-$1"
  mkdir -p "$dir" "$DATA/engine-$i"
  ip netns add "$ns"
  ip link add "se$i" type veth peer name eth0 netns "$ns"
  ip link set "se$i" master "$BRIDGE" up
  ip -n "$ns" addr add "$(address "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" route add default via "$PREFIX.1"
  echo '{}' >"$dir/daemon.json"  # not the host's /etc/docker/daemon.json
  # nsenter, not `ip netns exec`: the engine keeps the host's /sys (its cgroups) and mounts.
  # DOCKER_SERVICE_PREFER_OFFLINE_IMAGE: a swarm task pulls its image before it starts, even one
  # the engine holds; with no registry each pull waited out a DNS timeout (~20 s each, 55 s
  # before the first rack ran). The images are loaded below: the engine uses what it has.
  DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 setsid nsenter --net="/run/netns/$ns" dockerd --config-file "$dir/daemon.json" \
    --data-root "$DATA/engine-$i" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
    --host "unix://$dir/docker.sock" --host "$(url "$i")" --tls=false \
    --cgroup-parent "stormlab-engine-$i" >"$dir/dockerd.log" 2>&1 </dev/null &
}

up() {
  local n=${1:-3}
  case "$n" in '' | *[!0-9]*) say "N must be a number of engines, got '$n'"; exit 2 ;; esac
  if [ "$n" -lt 1 ] || [ "$n" -gt 9 ]; then say "N must be 1 to 9, got $n"; exit 2; fi
  if [ -d "$RUN" ] || ip link show "$BRIDGE" >/dev/null 2>&1; then say "engines are already up: docker/swarm-engines.sh down first"; exit 2; fi
  local images=("${STORMLAB_IMAGE:-stormlab:0.1.0}" "${PROMETHEUS_IMAGE:-prom/prometheus:v2.42.0}" "${ALERTMANAGER_IMAGE:-prom/alertmanager:v0.25.0}")
  # shellcheck disable=SC2206
  images+=(${STORMLAB_ENGINE_IMAGES:-})
  for image in "${images[@]}"; do
    docker image inspect "$image" >/dev/null 2>&1 || { say "no $image image on this host: build it first (docker/local-images.sh, make e2e)"; exit 2; }
  done
  local taken
  taken=$(ip -o route show to match "$PREFIX.0/24" | grep -v '^default' | head -1 || true)
  if [ -n "$taken" ]; then say "$PREFIX.0/24 is routed on this host already ($taken): set STORMLAB_ENGINES_PREFIX"; exit 2; fi
  mkdir -p "$RUN"
  ip link add "$BRIDGE" type bridge
  ip addr add "$PREFIX.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # the host's dockerd drops forwarded traffic by default: the engines' own (VXLAN, gossip, API)
  # crosses this bridge, and only theirs is let through
  iptables -w -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$TAG" -j ACCEPT
  local i
  for i in $(seq "$n"); do start_engine "$i"; done
  for i in $(seq "$n"); do wait_engine "$i"; done
  say "loading ${images[*]} into $n engines"
  docker save -o "$RUN/images.tar" "${images[@]}"
  local pids=()
  for i in $(seq "$n"); do
    docker -H "$(url "$i")" load -q -i "$RUN/images.tar" >/dev/null &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  rm -f "$RUN/images.tar"
  local manager token
  manager=$(url 1)
  docker -H "$manager" swarm init --advertise-addr "$(address 1)" >/dev/null
  token=$(docker -H "$manager" swarm join-token -q worker)
  for i in $(seq 2 "$n"); do
    docker -H "$(url "$i")" swarm join --advertise-addr "$(address "$i")" --token "$token" "$(address 1):2377" >/dev/null
  done
  for i in $(seq "$n"); do
    docker -H "$manager" node update --label-add "stormlab.engine=$(url "$i")" "$(docker -H "$(url "$i")" info -f '{{.Swarm.NodeID}}')" >/dev/null
  done
  say "a swarm of $n engines: manager $manager"
  echo "export DOCKER_HOST=$manager"
  echo "export STORMLAB_DESK_ADDR=$PREFIX.1"
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down) down ;;
  *) echo "usage: docker/swarm-engines.sh up [N] | down" >&2; exit 2 ;;
esac

# shellcheck shell=bash
# Shared by scripts/test-pgbouncer.sh, scripts/failover.sh and scripts/clock-skew.sh:
# sourced, not run.

# Installs Debian packages that are missing (CI machines start without them).
ensure_packages() {
  local missing=()
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}

# A TCP port free on 127.0.0.1 right now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Runs a command as the `postgres` user (PostgreSQL and pgbouncer refuse to run as root),
# or as the current user when that is not root.
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# A directory under /tmp that the postgres user may write (removed by the caller's trap).
postgres_temp_dir() {
  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  chmod 755 "$dir"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$dir"
  echo "$dir"
}

# wait_until SECONDS COMMAND...: true once COMMAND succeeds, false when time runs out.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# stop_groups PGID...: SIGTERM to each process group in turn, up to 10 s for all of them to
# exit, then SIGKILL to any left.
stop_groups() {
  local pgid alive
  for pgid in "$@"; do kill -TERM -- "-$pgid" 2>/dev/null; done
  for _ in $(seq 1 50); do
    alive=0
    for pgid in "$@"; do kill -0 -- "-$pgid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return 0
    sleep 0.2
  done
  for pgid in "$@"; do kill -KILL -- "-$pgid" 2>/dev/null; done
  return 0
}

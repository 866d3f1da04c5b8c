#!/usr/bin/env bash
# The official image's contract, in short: on an empty $PGDATA, initdb with POSTGRES_USER
# (default postgres) as the superuser, POSTGRES_PASSWORD as its password (scram-sha-256 from
# other hosts, trust over the local socket), and POSTGRES_DB (default: the user's name)
# created; then PostgreSQL runs as PID 1 (exec), as user postgres, listening on all addresses.
set -euo pipefail

if [ "${1:-}" = postgres ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA"
  chown -R postgres:postgres "$PGDATA"
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  user="${POSTGRES_USER:-postgres}"
  db="${POSTGRES_DB:-$user}"
  auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
    echo "error: POSTGRES_PASSWORD is not set (or set POSTGRES_HOST_AUTH_METHOD=trust)" >&2
    exit 1
  fi
  pwfile="$(mktemp)"
  printf '%s\n' "${POSTGRES_PASSWORD:-}" > "$pwfile"
  initdb --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host="$auth" \
    --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA"
  rm -f "$pwfile"
  printf 'host all all all %s\n' "$auth" >> "$PGDATA/pg_hba.conf"
  printf "listen_addresses = '*'\n" >> "$PGDATA/postgresql.conf"
  if [ "$db" != postgres ]; then
    # Single-user mode: the database is made with no socket open, before anyone can connect.
    echo "CREATE DATABASE \"$db\";" | postgres --single -D "$PGDATA" -j postgres > /dev/null
  fi
  echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"

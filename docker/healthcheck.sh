#!/bin/bash
# The image's health check without curl: an HTTP/1.0 GET over bash's /dev/tcp, healthy on a
# 200 status line. Usage: healthcheck [PORT] [PATH]; the port defaults to BIND_ADDR's (else
# 8080), the path to /health/ready (ready: the database answers).
set -eu
port="${1:-${BIND_ADDR##*:}}"
port="${port:-8080}"
path="${2:-/health/ready}"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$path" >&3
IFS= read -r -t 2 status <&3
case "$status" in
  "HTTP/1."[01]" 200 "*) exit 0 ;;
  *) echo "unhealthy: ${status:-no answer}" >&2; exit 1 ;;
esac

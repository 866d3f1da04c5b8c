#!/usr/bin/env bash
# Makes the base images the Dockerfile and docker-compose.yml name, on a machine that cannot
# pull from an image registry, from Debian's packages and this machine's Rust toolchain:
#   debian:bookworm-slim   a bookworm root made with debootstrap (minbase), imported
#   rust:1.95-bookworm     that root + cc, pkg-config, OpenSSL headers + the local Rust 1.95
#   postgres:15            that root + Debian's postgresql-15 + docker/base-images/postgres's
#                          entrypoint (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB)
# The stand-in debian image carries the machine's extra CAs (/usr/local/share/ca-certificates).
# An image the machine already has (made here before, or pulled) is left alone.
# Needs root, docker, debootstrap. Usage: scripts/compose-base-images.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_IMAGE=debian:bookworm-slim
RUST_IMAGE=rust:1.95-bookworm
POSTGRES_IMAGE=postgres:15
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TOOLCHAIN="${RUST_TOOLCHAIN_DIR:-$(rustc +1.95.0 --print sysroot 2>/dev/null || true)}"

have() { docker image inspect "$1" > /dev/null 2>&1; }
# The classic builder (DOCKER_BUILDKIT=0): it needs no buildx plugin, which a newer docker CLI
# would otherwise ask for; its output goes to a log shown only on failure.
build() {
  DOCKER_BUILDKIT=0 docker build -t "$1" "$2" > "$WORK/build.log" 2>&1 \
    || { tail -n 40 "$WORK/build.log" >&2; exit 1; }
}
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if have "$DEBIAN_IMAGE"; then
  echo "$DEBIAN_IMAGE: present"
else
  echo "$DEBIAN_IMAGE: debootstrap bookworm (minbase) from $MIRROR"
  debootstrap --variant=minbase bookworm "$WORK/root" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
    || { tail -n 30 "$WORK/debootstrap.log" >&2; exit 1; }
  cat > "$WORK/root/etc/apt/sources.list" <<SOURCES
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
  # The machine's own extra certificate authorities (a TLS-inspecting egress proxy's, a
  # company CA): images that install ca-certificates on this root trust them, so builds reach
  # crates.io from a container as the machine does. The official images have none.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
    mkdir -p "$WORK/root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$WORK/root/usr/local/share/ca-certificates/"
  fi
  # apt and dpkg set up as in the official image: no package caches or .deb files left in
  # a layer after apt-get, no documentation, man pages or translations installed.
  cat > "$WORK/root/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
  printf 'Acquire::Languages "none";\n' > "$WORK/root/etc/apt/apt.conf.d/docker-no-languages"
  printf 'APT::AutoRemove::SuggestsImportant "false";\n' > "$WORK/root/etc/apt/apt.conf.d/docker-autoremove-suggests"
  cat > "$WORK/root/etc/dpkg/dpkg.cfg.d/docker" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
DPKG
  # Slim as the official image: no apt lists or caches, no documentation, no man pages.
  rm -rf "$WORK/root"/var/lib/apt/lists/* "$WORK/root"/var/cache/apt/*.bin \
    "$WORK/root"/var/cache/apt/archives/*.deb "$WORK/root"/usr/share/doc/* \
    "$WORK/root"/usr/share/man/* "$WORK/root"/usr/share/info/* "$WORK/root"/var/log/*.log \
    "$WORK/root"/var/cache/debconf/*-old "$WORK/root"/var/lib/dpkg/*-old
  tar --numeric-owner -C "$WORK/root" -c . \
    | docker import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - "$DEBIAN_IMAGE" > /dev/null
  rm -rf "$WORK/root"
fi

if have "$RUST_IMAGE"; then
  echo "$RUST_IMAGE: present"
else
  if [ -z "$TOOLCHAIN" ] || [ ! -x "$TOOLCHAIN/bin/cargo" ]; then
    echo "FAIL: no Rust 1.95 toolchain with cargo on this machine (set RUST_TOOLCHAIN_DIR)" >&2
    exit 1
  fi
  echo "$RUST_IMAGE: $DEBIAN_IMAGE + $(basename "$TOOLCHAIN")"
  mkdir -p "$WORK/rust"
  cp docker/base-images/rust/Dockerfile "$WORK/rust/"
  # Hard links, not a copy: the context costs no disk; the HTML docs (800 MB) stay out.
  cp -al "$TOOLCHAIN/." "$WORK/rust/toolchain" 2> /dev/null || cp -a "$TOOLCHAIN/." "$WORK/rust/toolchain"
  rm -rf "$WORK/rust/toolchain/share/doc"
  build "$RUST_IMAGE" "$WORK/rust"
fi

if have "$POSTGRES_IMAGE"; then
  echo "$POSTGRES_IMAGE: present"
else
  echo "$POSTGRES_IMAGE: $DEBIAN_IMAGE + Debian's postgresql-15"
  build "$POSTGRES_IMAGE" docker/base-images/postgres
fi

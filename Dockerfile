# The production image: a release build with TLS to PostgreSQL (feature postgres-tls: libpq
# built with OpenSSL), on Debian slim, as a non-root user, with a health check and the binary
# as PID 1. `docker compose up` builds it; docs/compose.md says what and why.
FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src

# 1. The dependencies alone, from the manifests and stub sources: this layer is kept until
#    Cargo.toml or Cargo.lock changes, so a change to src/ rebuilds only this crate. The
#    workspace's member clients/rust needs its manifest (and a target) for Cargo to load the
#    workspace; the benchmark needs its file for the manifest to name it. Neither is built.
COPY Cargo.toml Cargo.lock ./
COPY clients/rust/Cargo.toml clients/rust/
RUN mkdir -p src/bin benches clients/rust/src \
 && echo 'fn main() {}' > src/main.rs \
 && cp src/main.rs src/bin/provider-sim.rs \
 && cp src/main.rs benches/loadgen.rs \
 && touch src/lib.rs clients/rust/src/lib.rs \
 && cargo build --release --locked --features postgres-tls -p payments-api --bins \
 && rm -rf src

# 2. This crate. The copied sources may be older than the stubs' build; touching them makes
#    Cargo rebuild the crate rather than take the stubs' build as fresh.
COPY diesel.toml ./
COPY migrations migrations
COPY src src
RUN find src migrations -type f -exec touch {} + \
 && cargo build --release --locked --features postgres-tls -p payments-api --bins \
 && strip --strip-debug target/release/payments-api target/release/provider-sim

FROM debian:bookworm-slim
# libssl3 for libpq's TLS; ca-certificates for verify-full against a public CA (the service's
# own https clients carry Mozilla's roots). No curl: the health check is bash's /dev/tcp.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app app \
 && mkdir -p /app/data && chown app /app/data
COPY --from=build /src/target/release/payments-api /src/target/release/provider-sim /usr/local/bin/
COPY docker/healthcheck.sh /usr/local/bin/healthcheck
WORKDIR /app
USER app
ENV BIND_ADDR=0.0.0.0:8080 LOG_FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=4s --start-period=20s --retries=3 CMD ["healthcheck"]
# Exec form: the binary is PID 1 and receives SIGTERM itself (it stops accepting, finishes
# in-flight requests for up to 30 s, then stops its background tasks).
STOPSIGNAL SIGTERM
CMD ["payments-api", "serve"]

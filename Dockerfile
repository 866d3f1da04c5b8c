# Multi-stage build. The release binary talks TLS to PostgreSQL (feature postgres-tls:
# libpq built with OpenSSL), which the default, dependency-free build does not.
FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock diesel.toml ./
COPY src src
COPY migrations migrations
COPY benches benches
RUN cargo build --release --locked --features postgres-tls --bins

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app app \
 && mkdir -p /app/data && chown app /app/data
COPY --from=build /src/target/release/payments-api /src/target/release/provider-sim /usr/local/bin/
WORKDIR /app
USER app
ENV BIND_ADDR=0.0.0.0:8080 LOG_FORMAT=json
EXPOSE 8080
CMD ["payments-api", "serve"]

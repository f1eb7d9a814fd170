# syntax=docker/dockerfile:1
# The `baton` binary: every role, `migrate`, `profiles`, `demo` and `runs`.
#   docker build -t baton .          (needs BuildKit, the default since Docker 23)

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Only what the build reads: migrations/ and examples/profiles.toml are
# compiled into the binary (refinery, include_str!). Explicit paths keep a
# local target/ out of the image.
COPY Cargo.toml Cargo.lock ./
COPY shared ./shared
COPY workers ./workers
COPY bench ./bench
COPY tests ./tests
COPY migrations ./migrations
COPY examples ./examples
# The version the workers page shows: `--build-arg BATON_GIT_DESCRIBE=$(git describe --always --dirty)`.
ARG BATON_GIT_DESCRIBE=""
# target/ is a cache mount, so copy the binary out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p baton \
 && install -m 0755 target/release/baton /usr/local/bin/baton

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 baton \
 && useradd --system --uid 10001 --gid baton --no-create-home --shell /usr/sbin/nologin baton
COPY --from=builder /usr/local/bin/baton /usr/local/bin/baton
COPY examples/profiles.toml /etc/baton/profiles.toml
USER baton:baton
# On SIGTERM every role stops and is awaited before exit.
STOPSIGNAL SIGTERM
ENTRYPOINT ["baton"]
CMD ["up"]

# codemode-host with the example plugins and their precompiled cache, so that a pod
# starts in milliseconds from a read-only cache instead of compiling the
# interpreter (about 15 s) and every plugin.
#
#   docker build -t codemode-host:0.1.0 .
#   docker run -i --rm codemode-host:0.1.0          # MCP over stdio
#   docker build --target gateway -t codemode-host:0.1.0-gateway .   # + Python, Node.js
#
# Compiled code is specific to the CPU features of the machine that compiled it:
# build on the CPU family your nodes run, or a pod compiles again at start (and,
# its cache being read-only, at every start).
#
# To serve your own plugins, build FROM this image: copy them into /plugins and run
# `codemode-host precompile --plugins /plugins --cache-dir /cache` as root, then
# `chown -R 65532:65532 /cache`.

# Build: the release binary, the plugins, and the cache (`cargo xtask dist` checks
# that the server starts from them read-only, as the image's user). Node.js (22,
# from its official image: componentize-js needs 20 or later, Debian has 18) and
# a Python venv build the JavaScript and Python examples; without them the build
# fails instead of shipping fewer plugins.
FROM node:22-bookworm-slim AS node

FROM rust:1.97-bookworm AS build
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && apt-get update \
    && apt-get install -y --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/*
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
ENV CODEMODE_REQUIRE_FOREIGN_PLUGINS=1
RUN cargo xtask dist

# Gateway: the same server with Python and Node.js, for upstream MCP servers run
# as stdio children (`command = ["npx", ...]`, `["python3", "-m", ...]`). Pick it
# with `docker build --target gateway -t codemode-host:0.1.0-gateway .` when a
# config names such upstreams; the default image below has no shell and cannot run
# them. npx caches packages in $HOME (/tmp): give it a writable /tmp (an emptyDir
# under a read-only root filesystem). Python upstreams with dependencies need an
# image built FROM this one that installs them (there is no pip or uv).
FROM debian:bookworm-slim AS gateway
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/dist/bin/codemode-host /usr/local/bin/codemode-host
COPY --from=build /src/target/dist/plugins /plugins
COPY --from=build --chown=65532:65532 /src/target/dist/cache /cache
USER 65532:65532
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/codemode-host"]
CMD ["--plugins", "/plugins", "--cache-dir", "/cache"]

# Run (the default target): no shell, no package manager, a non-root user.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/dist/bin/codemode-host /usr/local/bin/codemode-host
COPY --from=build /src/target/dist/plugins /plugins
COPY --from=build --chown=65532:65532 /src/target/dist/cache /cache
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/codemode-host"]
CMD ["--plugins", "/plugins", "--cache-dir", "/cache"]

# Builds waste on Debian 12 and serves a container mounted at /model.
#   docker build -t waste .
#   docker run -p 8000:8000 -v /path/to/k3.waste:/model:ro waste
# scripts/docker-check builds it and checks the image answers /health.
FROM debian:12 AS build
WORKDIR /src
COPY scripts/bootstrap scripts/bootstrap
RUN scripts/bootstrap --build
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DWASTE_TESTS=OFF \
    && cmake --build build --target waste

# The runtime image holds the executable and the libraries it links, nothing of the toolchain.
FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libsimdjson14 libspdlog1.10 libfmt9 libicu72 liburing2 libssl3 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/waste /usr/local/bin/waste
EXPOSE 8000
VOLUME /model
# The daemon binds 127.0.0.1 by default; inside a container it must listen on all interfaces
# for the published port to reach it. /health is 200 once the model is loaded and serving.
HEALTHCHECK --interval=30s --timeout=10s --start-period=10m --retries=3 \
  CMD ["/usr/local/bin/waste", "health", "http://127.0.0.1:8000/health"]
ENTRYPOINT ["/usr/local/bin/waste"]
CMD ["serve", "/model", "--host", "0.0.0.0", "--port", "8000"]

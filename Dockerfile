# Builds waste on Debian 12 and serves a container mounted at /model.
#   docker build -t waste .
#   docker run -p 8000:8000 -v /path/to/k3.waste:/model:ro waste
FROM debian:12 AS build
WORKDIR /src
COPY scripts/bootstrap scripts/bootstrap
RUN scripts/bootstrap
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build --target waste

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libsimdjson14 libspdlog1.10 libfmt9 libicu72 liburing2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/waste /usr/local/bin/waste
EXPOSE 8000
VOLUME /model
# The daemon binds 127.0.0.1 by default; inside a container it must listen on all interfaces
# for the published port to reach it.
ENTRYPOINT ["/usr/local/bin/waste"]
CMD ["serve", "/model", "--host", "0.0.0.0", "--port", "8000"]

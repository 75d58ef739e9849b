# One image, every Kontinue process: the webhook (kontinue-webhook), the bridge (kontinue-bridge),
# the restore init-container (kontinue-restore) and the reference workload
# (python -m reference_workload.trainer) used by the kind demo.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kontinue ./kontinue
COPY webhook ./webhook
COPY queue_bridge ./queue_bridge
COPY reference_workload ./reference_workload
COPY emulator ./emulator
COPY benchmarks ./benchmarks
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.12-slim
COPY --from=build /install /usr/local
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin kontinue
USER 65532:65532
ENV PYTHONUNBUFFERED=1
ENTRYPOINT []
CMD ["kontinue-bridge"]

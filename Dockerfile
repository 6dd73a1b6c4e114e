# One image for every cardflow process; the compose file / manifests choose the command:
#   cardflow service intake|readiness|matcher|dispatcher|ledger|views
#   cardflow agent --id ID --sim H100x8      cardflow console      cardflow doctor
# The image also carries the embedded servers' packages, so `cardflow up` works in it as well, and
# nvidia-ml-py (the `gpu` extra) for `cardflow agent --real` on GPU nodes (deploy/kubernetes), and the
# OpenTelemetry SDK and OTLP exporter (the `tracing` extra) for CARDFLOW_TRACING=otlp.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CARDFLOW_DATA_DIR=/data

WORKDIR /app

# Dependencies first, at the exact versions of the lock file (cached while only the code changes),
# then the code without resolving anything again.
COPY requirements.lock ./
RUN pip install -r requirements.lock
COPY pyproject.toml README.m[d] ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-deps .

# Never run as root; /data (named volumes mount here) belongs to the service user.
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin cardflow \
    && mkdir -p /data && chown cardflow:cardflow /data
USER cardflow
VOLUME ["/data"]

CMD ["cardflow", "--help"]

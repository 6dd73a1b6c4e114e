"""OpenTelemetry tracing of message handling, off unless `CARDFLOW_TRACING` says otherwise.

- `off` (default): nothing is added;
- `otlp`: FastStream's telemetry middleware with an SDK tracer provider exporting over OTLP/HTTP,
  configured by the standard `OTEL_EXPORTER_OTLP_*` variables (endpoint, headers, ...); needs the
  `tracing` extra (`pip install 'cardflow[tracing]'`);
- `console`: the same spans printed to standard output (to try it without a collector).

Every span carries the resource attribute `service.name` = `cardflow-<service>`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.settings import Settings


class TracingUnavailable(RuntimeError):
    """Tracing was asked for but the OpenTelemetry SDK (or its exporter) is not installed."""


def telemetry_middleware(settings: Settings, service: str) -> tuple[Any, Any] | None:
    """FastStream's Redis telemetry middleware for `service` and its tracer provider (shut it down at
    the end, which flushes the last spans), or None when tracing is off."""
    if settings.tracing == "off":
        return None
    from faststream.redis.opentelemetry import RedisTelemetryMiddleware

    provider = tracer_provider(settings, service)
    return RedisTelemetryMiddleware(tracer_provider=provider), provider


def tracer_provider(settings: Settings, service: str) -> Any:
    """An SDK tracer provider whose spans go to the configured exporter."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        raise TracingUnavailable(
            f"CARDFLOW_TRACING={settings.tracing} needs the OpenTelemetry SDK: pip install 'cardflow[tracing]'"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": f"cardflow-{service}"}))
    exporter = ConsoleSpanExporter() if settings.tracing == "console" else _otlp_exporter(settings)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _otlp_exporter(settings: Settings) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise TracingUnavailable(
            f"CARDFLOW_TRACING={settings.tracing} needs the OTLP exporter: pip install 'cardflow[tracing]'"
        ) from exc
    return OTLPSpanExporter()

"""CARDFLOW_TRACING=otlp: a service's message handling is traced and exported over OTLP/HTTP.

A small OTLP/HTTP receiver on 127.0.0.1 collects what the exporter sends (protobuf, decoded with
the OpenTelemetry protocol's own messages); tracing off sends nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from services.intake.service import SPEC as INTAKE
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.integration.intake.harness import a_submission, published_events, xadd_ingest


class Receiver(ThreadingHTTPServer):
    """Keeps every ExportTraceServiceRequest POSTed to /v1/traces."""

    requests: list[ExportTraceServiceRequest]


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            self.server.requests.append(request)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(("127.0.0.1", 0), _Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def spans_by_service(receiver: Receiver) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for request in receiver.requests:
        for resource_spans in request.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            names = [span.name for scope in resource_spans.scope_spans for span in scope.spans]
            found.setdefault(attributes.get("service.name", ""), []).extend(names)
    return found


@pytest.mark.parametrize("tracing", ["otlp", "off"])
async def test_message_handling_is_traced_only_when_asked(
    fresh_settings: Settings, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, tracing: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_address[1]}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    settings = fresh_settings.model_copy(update={"tracing": tracing})

    async with RunningServices(settings, INTAKE) as services:
        await xadd_ingest(services.redis, "task.submit", a_submission())

        async def submitted() -> bool:
            return bool(await published_events(services.redis, "task.submitted"))

        assert await services.wait_until(submitted)
    # the service has stopped: its tracer provider was shut down, which flushes every span

    spans = spans_by_service(receiver)
    if tracing == "off":
        assert spans == {}
    else:
        assert list(spans) == ["cardflow-intake"]
        assert [name for name in spans["cardflow-intake"] if "cf:ingest" in name], spans

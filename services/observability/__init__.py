"""Metrics (Prometheus) and tracing (OpenTelemetry) for every cardflow process; see docs/operations.md."""

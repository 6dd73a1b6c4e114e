"""Schemathesis against the OpenAPI the console serves (issue 15 item 6).

Every service runs (`running_system`, each as its own Redis user and PostgreSQL role) and
`cardflow console` runs as users reach it (uvicorn in a subprocess, as the console's Redis user and
PostgreSQL role, over the session's real Redis, PostgreSQL and S3); the test loads `/openapi.json`
from it and, with a real admin token, sends every `/v1` operation

- cases schemathesis generates from the schema: `POSITIVE_EXAMPLES` that fit it and
  `NEGATIVE_EXAMPLES` that do not (wrong types, missing fields, out-of-range values);
- the hostile inputs of issue 15 as explicit examples: every hostile JSON text (NaN, Infinity, NUL,
  lone surrogates, 100,000-deep nesting, two megabytes...) as the body of every operation that
  takes one, a binary body as application/octet-stream, a body as text/plain, and NUL / surrogate /
  NaN / 5,000-character values in every path and query parameter;

and checks each answer: no 5xx, a status code the schema documents for that operation, the
documented content type, a body that validates against the documented response schema, and the
documented headers. Every problem found is listed at the end (operation, input, what broke), not
only the first. Hypothesis runs derandomised, so a run repeats.

Run it alone: `.venv/bin/python -m pytest tests/reliability/test_openapi_fuzz.py -q`.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from shared.settings import Settings
from tests.helpers.console_server import bearer, first_admin
from tests.helpers.redis_users import service_settings
from tests.helpers.system import running_system
from tests.reliability.hostile import HTTP_HOSTILE, a_valid
from tests.reliability.http_server import served_console

POSITIVE_EXAMPLES = 8
NEGATIVE_EXAMPLES = 4
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
HOSTILE_PARAMETERS = {
    "NUL": "\x00",
    "lone surrogate": "%ED%A0%80",  # sent percent-encoded as it is: the UTF-8 bytes of U+D800
    "NaN": "NaN",
    "1e400": "1e400",
    "5,000 characters": "x" * 5000,
}
ADMIN_NAME = "schemathesis-admin-7f3c"  # a name the generated token refs will not hit


async def test_every_v1_operation_answers_as_its_schema_says(
    fresh_settings: Settings, data_dir_factory: Callable[[], Path]
) -> None:
    token = await first_admin(fresh_settings, ADMIN_NAME)
    async with running_system(fresh_settings, data_dir_factory()) as system:
        console = service_settings(system.settings, "console", system.users_dir, pg_role=system.pg_roles)
        with served_console(console, data_dir_factory()) as url:
            failures, operations = await asyncio.to_thread(fuzz_served_api, url, token)
            async with httpx.AsyncClient(base_url=url, headers=bearer(token)) as http:
                still_admin = await http.get("/v1/whoami")
    assert operations >= 60, f"only {operations} /v1 operations in the served schema"
    assert still_admin.status_code == 200, "the fuzzing revoked its own token: later answers were all 401"
    assert not failures, f"{len(failures)} problems:\n\n" + "\n\n".join(failures)


def fuzz_served_api(url: str, token: str) -> tuple[list[str], int]:
    """(every problem found, the number of /v1 operations) for the console at `url`."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", timeout=60)
    failures: list[str] = []
    operations = 0
    with httpx.Client(base_url=url, headers=bearer(token), timeout=120) as http:
        for result in schema.get_all_operations():
            operation = result.ok()
            if not operation.path.startswith("/v1"):
                continue
            operations += 1
            for mode, examples in ((GenerationMode.POSITIVE, POSITIVE_EXAMPLES), (GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)):
                failures += _generated(operation, mode, examples, url, token)
            failures += _hostile(operation, http)
    return failures, operations


def _generated(operation: Any, mode: GenerationMode, examples: int, url: str, token: str) -> list[str]:
    """Problems with `examples` cases schemathesis generates for one operation (the first of each)."""
    found: dict[str, str] = {}

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=True,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(case=operation.as_strategy(generation_mode=mode))
    def send(case: Any) -> None:
        response = case.call(base_url=url, headers=bearer(token), timeout=120)
        try:
            case.validate_response(response, checks=CHECKS)
        except (Exception, BaseExceptionGroup) as error:  # noqa: BLE001 - every check failure is collected, not only the first
            key = f"{type(error).__name__}:{getattr(response, 'status_code', '?')}"
            found.setdefault(key, f"{operation.label} [{mode.value}] {case.as_curl_command()}\n  {error}")

    try:
        send()
    except Unsatisfiable:  # nothing to vary (no parameters, no body): the positive run covered it
        pass
    except (Exception, BaseExceptionGroup) as error:  # noqa: BLE001 - a case that could not even be sent is a problem too
        found.setdefault("unsent", f"{operation.label} [{mode.value}]: {type(error).__name__}: {error}")
    return list(found.values())


def _hostile(operation: Any, http: httpx.Client) -> list[str]:
    """Problems with issue 15's hostile inputs sent to one operation."""
    problems = []
    for label, request in _hostile_requests(operation):
        try:
            response = http.request(operation.method.upper(), **request)
        except httpx.TransportError as error:  # a dropped connection loses the client's request
            problems.append(f"{operation.label} [hostile: {label}] -> {type(error).__name__}: {error}")
            continue
        try:
            operation.Case().validate_response(response, checks=CHECKS)
        except (Exception, BaseExceptionGroup) as error:  # noqa: BLE001 - collected with the input that caused it
            problems.append(f"{operation.label} [hostile: {label}] -> {response.status_code}\n  {error}")
    return problems


def _hostile_requests(operation: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, httpx request arguments) of every hostile input that applies to `operation`."""
    path_names = [p.name for p in operation.path_parameters]
    plain_path = _path(operation.path, {name: "T-none" for name in path_names})
    if operation.body:
        for label, body in HTTP_HOSTILE.items():
            yield f"body {label}", {"url": plain_path, "content": body, "headers": {"content-type": "application/json"}}
        yield "binary body", {"url": plain_path, "content": bytes(range(256)), "headers": {"content-type": "application/octet-stream"}}
        yield "text/plain body", {"url": plain_path, "content": a_valid("as text"), "headers": {"content-type": "text/plain"}}
    for name in path_names:
        for label, value in HOSTILE_PARAMETERS.items():
            url = _path(operation.path, {other: value if other == name else "T-none" for other in path_names})
            yield f"path {name} {label}", {"url": url, **_empty_body(operation)}
    for parameter in operation.query:
        for label, value in HOSTILE_PARAMETERS.items():
            raw = f"{parameter.name}={value}" if value.startswith("%") else urllib.parse.urlencode({parameter.name: value})
            yield f"query {parameter.name} {label}", {"url": f"{plain_path}?{raw}", **_empty_body(operation)}


def _path(template: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        encoded = value if value.startswith("%") else urllib.parse.quote(value, safe="")
        template = template.replace("{" + name + "}", encoded)
    return template


def _empty_body(operation: Any) -> dict[str, Any]:
    """A JSON object as body for operations that take one (so the hostile parameter is what is judged)."""
    return {"json": {}} if operation.body else {}

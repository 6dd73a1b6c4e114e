"""Hostile input on every /v1 route is a 4xx naming what is wrong, never a 500 (issue 15).

FastAPI reads JSON bodies with Python's `json`, which takes NaN, Infinity, NUL characters, unpaired
surrogates and any nesting; such a value then either reached PostgreSQL (500) or was echoed in the
422 and broke its JSON encoding (500, and uvicorn closed the kept-alive connection, losing the
client's next request). `RequestGuard` (an ASGI middleware) checks each /v1 request before any
route sees it:

- a path or query value holding text PostgreSQL cannot store (NUL, unpaired surrogates) is a 422;
- a body (POST/PUT/PATCH/DELETE) that is not `application/json` (or `+json`) is a 415, one over
  `MAX_BODY_BYTES` a 413, one that is not UTF-8 JSON a 422, and one holding NaN/Infinity, NUL,
  unpaired surrogates or nesting deeper than `MAX_DEPTH` a 422 naming each place
  (`shared.submission.raw.raw_problems`).

A 422 has FastAPI's shape (`{"detail": [{"loc", "msg", "type"}]}`), so the OpenAPI's
`HTTPValidationError` describes it; `validation_error_handler` answers FastAPI's own 422s in the
same shape without echoing the input. Routes that read their body themselves and answer with
their own problem list (`OWN_BODY_READERS`: POST /v1/tasks, POST /v1/check) get only the path and
query checks and the 415.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, unquote

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.submission.limits import MAX_DEPTH, MAX_SUBMISSION_BYTES
from shared.submission.raw import raw_problems
from shared.submission.storable import unstorable_text

MAX_BODY_BYTES = MAX_SUBMISSION_BYTES
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})  # DELETE /v1/agents/{id} takes {reason}
OWN_BODY_READERS = frozenset({("POST", "/v1/tasks"), ("POST", "/v1/check")})
_TEXT_EXPECTED = {"NUL": "text without NUL characters", "surrogate": "valid UTF-8 text (no unpaired surrogates)"}


def is_json_media_type(content_type: str) -> bool:
    media_type = content_type.split(";")[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def parameter_errors(raw_path: str, query_string: str) -> list[dict[str, Any]]:
    """FastAPI-shaped errors for path segments and query values PostgreSQL cannot store."""
    errors = []
    for segment in raw_path.split("/"):
        why = unstorable_text(unquote(segment, errors="surrogateescape"))
        if why is not None:
            errors.append(_error(["path"], f"a path segment holds {why}: expected {_TEXT_EXPECTED[why]}"))
    pairs = parse_qsl(query_string, keep_blank_values=True, errors="surrogateescape")
    for name, value in pairs:
        why = unstorable_text(name) or unstorable_text(value)
        if why is not None:
            errors.append(_error(["query", name.encode("utf-8", "backslashreplace").decode()], f"expected {_TEXT_EXPECTED[why]}"))
    return errors


def body_errors(body: bytes) -> list[dict[str, Any]]:
    """FastAPI-shaped errors for a JSON body no route may receive (empty list: the body may pass)."""
    try:
        value = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as error:
        return [_error(["body"], f"the body is not UTF-8 text (byte {error.start})", "json_invalid")]
    except RecursionError:
        return [_error(["body"], f"the body is nested too deeply to read (at most {MAX_DEPTH} levels)", "json_invalid")]
    except ValueError as error:
        return [_error(["body"], f"the body is not JSON: {error}", "json_invalid")]
    return [_error(["body", *_loc(p.field)], f"expected {p.expected}") for p in raw_problems(value)]


class RequestGuard:
    """ASGI middleware applying the module docstring's checks to /v1 requests."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        errors = parameter_errors(raw_path, scope.get("query_string", b"").decode("latin-1"))
        if errors:
            await _answer(scope, receive, send, 422, {"detail": errors})
            return
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        body, refusal = await _read_body(scope, receive)
        if refusal is None and body:
            refusal = _body_refusal(scope, body)
        if refusal is not None:
            await _answer(scope, receive, send, *refusal)
            return
        await self.app(scope, _replay(body, receive), send)


def _body_refusal(scope: Scope, body: bytes) -> tuple[int, dict[str, Any]] | None:
    content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
    if not is_json_media_type(content_type):
        return 415, {"detail": f"send the body as application/json (got {content_type or 'no content type'!r})"}
    if (scope["method"], scope["path"]) in OWN_BODY_READERS:
        return None
    errors = body_errors(body)
    return (422, {"detail": errors}) if errors else None


async def _read_body(scope: Scope, receive: Receive) -> tuple[bytes, tuple[int, dict[str, Any]] | None]:
    too_large = (413, {"detail": f"a request body is at most {MAX_BODY_BYTES} bytes"})
    declared = dict(scope["headers"]).get(b"content-length", b"")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return b"", too_large
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return b"", too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(scope: Scope, receive: Receive, send: Send, status: int, content: dict[str, Any]) -> None:
    await JSONResponse(content, status_code=status)(scope, receive, send)


async def validation_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 without the offending input (which may be NaN or unencodable text)."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail = [_error([str(part) for part in e.get("loc", ())], str(e.get("msg", "")), str(e.get("type", "value_error")))
              for e in errors]  # fmt: skip
    return JSONResponse({"detail": detail}, status_code=422)


def _error(loc: list[str], msg: str, kind: str = "value_error") -> dict[str, Any]:
    return {"loc": [_printable(part) for part in loc], "msg": _printable(msg), "type": kind}


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\u0000")


DETAIL_SCHEMA = {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
VALIDATION_SCHEMA = {"$ref": "#/components/schemas/HTTPValidationError"}


def document_guarded_answers(schema: dict[str, Any]) -> None:
    """Add to the OpenAPI `schema` the answers every /v1 operation may give besides its own: 401/403
    (token, role), 422 (the guard's checks), for bodies 413/415, for path ids 404 (not found)."""
    for path, operations in schema.get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        for operation in operations.values():
            answers = operation.setdefault("responses", {})
            extra = {"422": ("a path, query or body value that is not accepted", VALIDATION_SCHEMA)}
            if path != "/v1/labels":
                extra |= {"401": ("no token, or one that is unknown or revoked", DETAIL_SCHEMA),
                          "403": ("the token's role or project does not allow this", DETAIL_SCHEMA)}  # fmt: skip
            if "requestBody" in operation:
                extra |= {"413": (f"a body over {MAX_BODY_BYTES} bytes", DETAIL_SCHEMA),
                          "415": ("a body not sent as application/json", DETAIL_SCHEMA)}  # fmt: skip
            if "{" in path:
                extra |= {"404": ("no such item (the id in the path is unknown)", DETAIL_SCHEMA)}
            for status, (description, body) in extra.items():
                answers.setdefault(status, {"description": description, "content": {"application/json": {"schema": body}}})


def _loc(field: str) -> list[str]:
    return [part for part in field.replace("[", ".").replace("]", "").split(".") if part] or [field]

"""The one change path for versioned configuration, over HTTP (the CLI's `config` and `template` call it).

Reads need any valid token; changes need the `operator` role and a `reason`, and are recorded
with the caller's actor (never a field of the body). Each change is `ConfigStore.apply/set/rollback`:
a new S3 object version, a `config.versions` row and a `config.changed` / `template.changed` event
in one unit. Answers: 422 a bad document (every problem), 409 a stale base or no change, 404 an
unknown document or version, 503 object storage unreachable.
"""

from __future__ import annotations

from typing import Annotated, Any

from botocore.exceptions import BotoCoreError, ClientError
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from services.config.store import (
    BucketMismatchError,
    ConfigStore,
    NothingToChangeError,
    StaleBaseError,
    UnknownVersionError,
)
from services.console.routes.common import NOT_FOUND
from services.console.auth import Authenticated, requires
from shared.config import (
    DocumentInvalid,
    DocumentKind,
    DocumentName,
    DocumentTextError,
    UnknownDocumentError,
    parse_document_name,
    strip_version_header,
    version_header,
)
from shared.events.values import Detail
from shared.identity import Principal, Role

router = APIRouter(tags=["config"])
Operator = Annotated[Principal, requires(Role.OPERATOR)]
NameQuery = Annotated[str, Query(description="policy, cards or templates/<name>")]
Reason = Annotated[Detail, Field(min_length=1, description="why; recorded in the history and the event")]


class ApplyBody(BaseModel):
    name: str = Field(description="policy, cards or templates/<name>")
    content: str = Field(max_length=1_000_000, description="the whole document (YAML); a `config show` header names the base")
    base: int | None = Field(None, ge=1, description="the version the change was made on (default: the header's, else the one in force)")
    reason: Reason


class SetBody(BaseModel):
    name: str
    assignments: list[str] = Field(min_length=1, description="key.path=value, e.g. headroom.default=0.15")
    base: int | None = Field(None, ge=1)
    reason: Reason


class RollbackBody(BaseModel):
    name: str
    version: int = Field(ge=1, description="the version whose content becomes the new version")
    base: int | None = Field(None, ge=1)
    reason: Reason


def store_of(request: Request) -> ConfigStore:
    store = getattr(request.app.state, "config_store", None)
    if store is None:
        raise HTTPException(503, "the config store is not available: CARDFLOW_S3_ENDPOINT is not set for the console")
    return store


def document(name: str) -> DocumentName:
    try:
        return parse_document_name(name)
    except UnknownDocumentError as exc:
        raise HTTPException(404, str(exc)) from None


@router.get("/config/documents", summary="Every document and the version in force")
async def get_documents(request: Request, _: Authenticated, kind: DocumentKind | None = None) -> list[dict[str, Any]]:
    return [record.summary() for record in await store_of(request).documents(kind)]


@router.get("/config/show", responses=NOT_FOUND, summary="A document version as the bucket holds it (checked against its sha256)")
async def get_document(request: Request, _: Authenticated, name: NameQuery,
                       version: Annotated[int | None, Query(ge=1)] = None) -> dict[str, Any]:  # fmt: skip
    doc = document(name)
    async with _answers(doc):
        record, text = await store_of(request).read_from_bucket(doc, version)
    return record.summary() | {"content": text, "header": version_header(doc.name, record.version)}


@router.get("/config/history", responses=NOT_FOUND, summary="Every version: who, when, why, where in the bucket")
async def get_history(request: Request, _: Authenticated, name: NameQuery) -> dict[str, Any]:
    doc, store = document(name), store_of(request)
    async with _answers(doc):
        versions = [record.summary() for record in await store.history(doc)]
        dangling = [v.version_id for v in await store.dangling(doc)]
    return {"name": doc.name, "versions": versions, "uncommitted_s3_versions": dangling}


@router.get("/config/diff", responses=NOT_FOUND, summary="Unified diff between two versions (default new: the one in force)")
async def get_diff(request: Request, _: Authenticated, name: NameQuery, old: Annotated[int, Query(ge=1)],
                   new: Annotated[int | None, Query(ge=1)] = None) -> dict[str, Any]:  # fmt: skip
    doc = document(name)
    async with _answers(doc):
        return {"name": doc.name, "diff": await store_of(request).diff(doc, old, new)}


@router.post("/config/apply", status_code=201, responses=NOT_FOUND, summary="A whole document as the new version (operator)")
async def post_apply(body: ApplyBody, request: Request, operator: Operator) -> dict[str, Any]:
    doc = document(body.name)
    text, header_base = strip_version_header(body.content)
    async with _answers(doc):
        change = await store_of(request).apply(doc, text, base=body.base or header_base, actor=operator.actor,
                                               reason=body.reason)
    return change.record.summary() | {"diff": change.diff}


@router.post("/config/set", status_code=201, responses=NOT_FOUND, summary="Set key.path=value on the version in force (operator)")
async def post_set(body: SetBody, request: Request, operator: Operator) -> dict[str, Any]:
    doc = document(body.name)
    async with _answers(doc):
        change = await store_of(request).set(doc, body.assignments, base=body.base, actor=operator.actor,
                                             reason=body.reason)
    return change.record.summary() | {"diff": change.diff}


@router.post("/config/rollback", status_code=201, responses=NOT_FOUND, summary="An older version's content as a new version (operator)")
async def post_rollback(body: RollbackBody, request: Request, operator: Operator) -> dict[str, Any]:
    doc = document(body.name)
    async with _answers(doc):
        change = await store_of(request).rollback(doc, body.version, base=body.base, actor=operator.actor,
                                                  reason=body.reason)
    return change.record.summary() | {"diff": change.diff}


class _answers:
    """Turn the store's refusals into HTTP answers with one clear sentence (and the problems)."""

    def __init__(self, name: DocumentName) -> None:
        self.name = name

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> bool:
        if error is None:
            return False
        if isinstance(error, DocumentInvalid | DocumentTextError):
            problems = [p.model_dump(mode="json") for p in error.problems]
            detail = str(error) if isinstance(error, DocumentInvalid) else f"{self.name} refused: {error}"
            raise _Answer(422, {"detail": detail, "problems": problems}) from None
        if isinstance(error, StaleBaseError | NothingToChangeError):
            raise _Answer(409, {"detail": str(error)}) from None
        if isinstance(error, UnknownVersionError):
            raise _Answer(404, {"detail": str(error.args[0])}) from None
        if isinstance(error, BucketMismatchError | BotoCoreError | ClientError):
            raise _Answer(503, {"detail": f"object storage: {error}"}) from None
        return False


class _Answer(HTTPException):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status, body["detail"])
        self.body = body


async def answer_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, _Answer)
    return JSONResponse(exc.body, status_code=exc.status_code)


def install(app: Any) -> None:
    """Answers with their problems list (422) instead of FastAPI's plain detail."""
    app.add_exception_handler(_Answer, answer_handler)


@router.get("/workload", summary="This installation's tasks of the last N days and its fleet, for `config what-if`")
async def get_workload(request: Request, _: Authenticated,
                       days: Annotated[float, Query(gt=0, le=90)] = 7.0) -> dict[str, Any]:  # fmt: skip
    from services.config.workload import load_workload

    return await load_workload(request.app.state.pool, days)

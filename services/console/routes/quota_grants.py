"""Quota grants: `POST /v1/quotas` gives a project GPU-hours for a validity window (operator).

The ledger's own command (`services.ledger.quotas.grant_quota`) runs here with a ledger `Emitter`
whose actor is the caller: the account row and its `quota.granted` event (with the reason) commit
together, and the ledger service's relay publishes the event. Reading accounts is `GET /v1/quotas`
(`routes/ledger.py`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from services.common.runtime import Emitter
from services.console.auth import requires
from services.config.holder import DocumentHolder
from services.console.routes.common import Pool, unprocessable
from services.ledger.quotas import DEFAULT_ALERT_LEAD_DAYS, grant_quota
from shared.cards import load_catalog
from shared.config import CARDS, catalog_of
from shared.events.values import Detail, EntityId
from shared.identity import Principal, Role

LEDGER_SCHEMA = "ledger"
router = APIRouter(prefix="/v1", tags=["ledger"])


class QuotaGrant(BaseModel):
    """A new quota account: GPU-hours for a project (optionally one card type) within a window."""

    model_config = ConfigDict(extra="forbid")

    project: EntityId
    gpu_hours: float = Field(gt=0, le=1e9, description="GPU-hours granted")
    valid_from: AwareDatetime
    valid_to: AwareDatetime
    alert_lead_days: float = Field(DEFAULT_ALERT_LEAD_DAYS, ge=0, le=3650, description="warn this many days before valid_to")
    card_type: EntityId | None = Field(None, description="only this card type; omit for any")
    reason: Detail = Field("", description="why, recorded in the quota.granted event")

    @field_validator("valid_to")
    @classmethod
    def _after_valid_from(cls, valid_to: datetime, info: ValidationInfo) -> datetime:
        """A field's own check, so a reversed window is listed with every other problem of the body."""
        valid_from = info.data.get("valid_from")
        if valid_from is not None and valid_to <= valid_from:
            raise ValueError(f"must be after valid_from ({valid_from.isoformat()})")
        return valid_to


async def unknown_card_type(pool: Pool, card_type: str | None) -> str | None:
    """Why `card_type` cannot be granted (not in the card catalog in force), or None."""
    if card_type is None:
        return None
    holder = DocumentHolder(CARDS, lambda model, _version: catalog_of(model, _version), load_catalog())
    await holder.refresh(pool)
    if card_type in holder.value.cards:
        return None
    return f"unknown card type {card_type!r}; the catalog has {', '.join(sorted(holder.value.cards))}"


class QuotaGranted(BaseModel):
    account_id: str
    project: str
    gpu_hours: float
    valid_from: datetime
    valid_to: datetime
    granted_by: str


@router.post("/quotas", status_code=201, response_model=QuotaGranted, summary="Grant GPU-hours to a project (operator)")
async def post_quota(body: QuotaGrant, request: Request, operator: Annotated[Principal, requires(Role.OPERATOR)]) -> QuotaGranted:
    if (problem := await unknown_card_type(request.app.state.pool, body.card_type)) is not None:
        raise HTTPException(422, [{"loc": ["body", "card_type"], "msg": problem, "type": "value_error"}])
    emitter = Emitter(LEDGER_SCHEMA, request.app.state.producer, operator.actor)
    try:
        async with request.app.state.pool.acquire() as conn, conn.transaction():
            event = await grant_quota(
                conn, emitter, project=body.project, gpu_hours=body.gpu_hours, valid_from=body.valid_from.astimezone(UTC),
                valid_to=body.valid_to.astimezone(UTC), alert_lead_days=body.alert_lead_days, card_type=body.card_type,
                reason=body.reason,
            )  # fmt: skip
    except ValidationError as exc:  # the event's own rules, e.g. valid_to after valid_from
        raise unprocessable(("body",), "quota not granted: " + "; ".join(error["msg"] for error in exc.errors())) from None
    data = event.data
    return QuotaGranted(account_id=data.account_id, project=data.project, gpu_hours=data.gpu_hours,
                        valid_from=data.valid_from, valid_to=data.valid_to, granted_by=event.actor)  # fmt: skip

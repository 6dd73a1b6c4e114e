"""Events written when versioned configuration or a template changes in object storage."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.events.envelope import Envelope, Payload
from shared.events.values import Detail, EntityId


class ConfigChangedData(Payload):
    file: EntityId = Field(description="object key, e.g. policy.yaml or cards.yaml")
    old_version: str | None = Field(None, description="object version replaced; None = first version")
    new_version: str = Field(min_length=1, description="object version now in force")
    diff: str = Field(description="unified diff from the old to the new content")
    reason: Detail = ""


class ConfigChanged(Envelope):
    """A configuration file got a new version (the actor says who; a rollback is a new version too)."""

    type: Literal["config.changed"] = "config.changed"
    data: ConfigChangedData


class TemplateChangedData(Payload):
    name: EntityId
    old_version: str | None = None
    new_version: str = Field(min_length=1)
    diff: str
    reason: Detail = ""


class TemplateChanged(Envelope):
    """A task template got a new version; submissions name `name@version` explicitly."""

    type: Literal["template.changed"] = "template.changed"
    data: TemplateChangedData

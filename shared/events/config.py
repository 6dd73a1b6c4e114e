"""Events the config store writes when a versioned document gets a new version.

`config.changed` announces a new version of `policy` or `cards`, `template.changed` one of a
submission template. Both carry who and why (envelope `actor`, `reason`), the old and new version,
where the new one is in the bucket (key, S3 version id, sha256) and the unified diff, so the
history can be read from the event log alone. A rollback is a new version too (`rolled_back_to`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from shared.events.envelope import Envelope, Payload
from shared.events.values import Detail

MAX_DIFF_CHARS = 100_000
"""A longer diff is cut with a note; `cardflow config diff` shows it whole."""

DocumentVersion = Annotated[int, Field(ge=1, description="the document's own version number: 1, 2, 3, ...")]


class ConfigAction(StrEnum):
    """How a version came to be."""

    SEEDED = "seeded"  # version 1, written from what was in force before the store existed
    APPLIED = "applied"  # a whole document was applied (`config apply`, `template apply`)
    SET = "set"  # some keys were set (`config set key.path=value`)
    ROLLED_BACK = "rolled_back"  # an older version's content, as a new version


class DocumentChangedData(Payload):
    name: str = Field(min_length=1, max_length=200, description="document name: policy, cards or templates/<name>")
    old_version: DocumentVersion | None = Field(None, description="the version replaced; None = first version")
    new_version: DocumentVersion = Field(description="the version now in force")
    action: ConfigAction
    rolled_back_to: DocumentVersion | None = Field(None, description="rolled_back: the version whose content this is")
    s3_key: str = Field(min_length=1, max_length=1024, description="object key in the config bucket")
    s3_version_id: str = Field(min_length=1, max_length=1024, description="the bucket's version id of the new content")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the new content")
    diff: str = Field(max_length=MAX_DIFF_CHARS + 200, description="unified diff from the old to the new content")
    reason: Detail = Field(min_length=1, description="why, as the actor gave it")

    @model_validator(mode="after")
    def _versions_follow(self) -> DocumentChangedData:
        expected = None if self.new_version == 1 else self.new_version - 1
        if self.old_version != expected:
            raise ValueError(f"old_version must be {expected} for new_version {self.new_version}")
        if (self.action is ConfigAction.ROLLED_BACK) != (self.rolled_back_to is not None):
            raise ValueError("rolled_back_to is given exactly when the action is rolled_back")
        return self


class ConfigChangedData(DocumentChangedData):
    """A new version of `policy` or `cards`."""


class ConfigChanged(Envelope):
    """`policy` or `cards` got a new version (the actor says who; a rollback is a new version too)."""

    type: Literal["config.changed"] = "config.changed"
    data: ConfigChangedData


class TemplateChangedData(DocumentChangedData):
    """A new version of `templates/<name>`."""


class TemplateChanged(Envelope):
    """A submission template got a new version; `name` is `templates/<name>`."""

    type: Literal["template.changed"] = "template.changed"
    data: TemplateChangedData

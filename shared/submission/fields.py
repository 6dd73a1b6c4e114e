"""Constrained text types of a task submission, each with a plain-English error.

Every type here is an `Annotated[str, ...]`: it validates with a custom error whose message says
what is expected (that message becomes `Problem.expected`), and it advertises a regex `pattern`
in the JSON Schema so clients can check values before sending them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, NamedTuple

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError


def _pattern_type(name: str, pattern: str, expected: str, *, max_length: int = 256) -> Any:
    """An `Annotated[str, ...]` that must fully match `pattern`; failing values say `expected`."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > max_length or not compiled.fullmatch(value):
            raise PydanticCustomError(name, expected)
        return value

    return Annotated[str, AfterValidator(check), Field(json_schema_extra={"pattern": pattern})]


# S3 bucket names: 3-63 lowercase letters, digits, dots and hyphens, starting and ending alphanumeric.
_BUCKET = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
S3_URI_PATTERN = rf"^s3://{_BUCKET}/\S.*$"

S3Uri = _pattern_type(
    "s3_uri",
    S3_URI_PATTERN,
    "an s3://bucket/key URI (a key ending in '/' names a prefix whose _READY marker must exist)",
    max_length=1024,
)
"""`s3://bucket/key`; a key ending in `/` is a prefix, complete when `prefix/_READY` exists."""

ProjectId = _pattern_type(
    "project_id",
    r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$",
    "a project id: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
)

TemplateRef = _pattern_type(
    "template_ref",
    r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}@[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$",
    "a template reference 'name@version', e.g. 'llm-finetune@3'",
)

EnvName = _pattern_type(
    "env_name",
    r"^[A-Za-z_][A-Za-z0-9_]{0,127}$",
    "an environment variable name: letters, digits and '_', not starting with a digit",
)

LabelKey = _pattern_type(
    "label_key",
    r"^[A-Za-z0-9][A-Za-z0-9._/\-]{0,62}$",
    "a label key: 1 to 63 letters, digits, '.', '_', '/' or '-', starting with a letter or digit",
)

CardTypeName = _pattern_type(
    "card_type",
    r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$",
    "a card type name as in the card catalog, e.g. 'H100' or 'A10G'",
)


class S3Location(NamedTuple):
    """The parts of an `s3://` input URI."""

    bucket: str
    key: str

    @property
    def is_prefix(self) -> bool:
        """True when the key names a prefix (ends in `/`): ready once `<prefix>_READY` exists."""
        return self.key.endswith("/")

    @property
    def ready_marker_key(self) -> str | None:
        """The key of the `_READY` marker for a prefix input; None for a single object."""
        return f"{self.key}_READY" if self.is_prefix else None


def parse_s3_uri(uri: str) -> S3Location:
    """Split `s3://bucket/key` into bucket and key; ValueError if `uri` is not such a URI."""
    if not re.fullmatch(S3_URI_PATTERN, uri):
        raise ValueError(f"not an s3://bucket/key URI: {uri!r}")
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    return S3Location(bucket, key)

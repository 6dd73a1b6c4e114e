"""Which configuration documents exist, what they are called, and where they live in the bucket.

Three kinds of document, each versioned on its own (1, 2, 3, ...):

| name               | kind       | object key in `CONFIG_BUCKET` | model                                  |
|--------------------|------------|-------------------------------|----------------------------------------|
| `policy`           | `policy`   | `policy.yaml`                 | `shared.config.policy.PolicyDocument`  |
| `cards`            | `cards`    | `cards.yaml`                  | `shared.config.card_catalog.CardsDocument` |
| `templates/<name>` | `template` | `templates/<name>.yaml`       | `shared.config.submission_templates.TemplateDocument` |

Pure: names and keys only; `shared.config.checking` validates content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

TEMPLATE_PREFIX = "templates/"
TEMPLATE_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._\-]{0,63}"
_TEMPLATE_NAME = re.compile(TEMPLATE_NAME_PATTERN)


class DocumentKind(StrEnum):
    """What a document configures."""

    POLICY = "policy"  # the scheduling policy the dispatcher plans with
    CARDS = "cards"  # the card catalog the matcher ranks with
    TEMPLATE = "template"  # a named set of submission defaults


class UnknownDocumentError(ValueError):
    """A document name that is neither `policy`, `cards` nor `templates/<name>`."""


@dataclass(frozen=True, slots=True)
class DocumentName:
    """A parsed document name: `policy`, `cards` or `templates/<template>`."""

    kind: DocumentKind
    template: str | None = None

    @property
    def name(self) -> str:
        return f"{TEMPLATE_PREFIX}{self.template}" if self.kind is DocumentKind.TEMPLATE else self.kind.value

    @property
    def object_key(self) -> str:
        """The key of this document's object in the config bucket."""
        return f"{self.name}.yaml"

    def __str__(self) -> str:
        return self.name


POLICY = DocumentName(DocumentKind.POLICY)
CARDS = DocumentName(DocumentKind.CARDS)


def template_document(template: str) -> DocumentName:
    """The document of template `template` (its name checked)."""
    if not _TEMPLATE_NAME.fullmatch(template):
        raise UnknownDocumentError(
            f"invalid template name {template!r}: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return DocumentName(DocumentKind.TEMPLATE, template)


def parse_document_name(name: str) -> DocumentName:
    """`"policy"`, `"cards"` or `"templates/<name>"` as a `DocumentName`; a clear error otherwise."""
    if name == POLICY.name:
        return POLICY
    if name == CARDS.name:
        return CARDS
    if name.startswith(TEMPLATE_PREFIX):
        return template_document(name.removeprefix(TEMPLATE_PREFIX))
    raise UnknownDocumentError(f"unknown document {name!r}: use policy, cards or templates/<name>")

"""Validate a document's text against the model of its kind; report every problem at once.

    valid = validate_document(POLICY, text)     # ValidDocument(name, text, model, sha256)
    # or DocumentInvalid(problems): each names the field (dotted path), the value and what is expected

A bad document is refused whole: nothing is written and the version in force stays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

from shared.config.card_catalog import CardsDocument
from shared.config.documents import DocumentKind, DocumentName
from shared.config.policy import PolicyDocument
from shared.config.submission_templates import TemplateDocument
from shared.config.yaml_text import DocumentTextError, parse_yaml, sha256_of
from shared.submission import Problem, describe, problems_from
from shared.submission.validate import field_names_of

MODELS: dict[DocumentKind, type[BaseModel]] = {
    DocumentKind.POLICY: PolicyDocument,
    DocumentKind.CARDS: CardsDocument,
    DocumentKind.TEMPLATE: TemplateDocument,
}
"""The model that validates each kind of document."""


class DocumentInvalid(ValueError):
    """A document that cannot be stored; `.problems` lists everything wrong with it."""

    def __init__(self, name: DocumentName, problems: list[Problem]) -> None:
        self.name = name
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"{name} refused, {count}; the version in force stays:\n{describe(problems)}")


@dataclass(frozen=True, slots=True)
class ValidDocument:
    """A document that passed validation: its text (stored as is), its model, its fingerprint."""

    name: DocumentName
    text: str
    model: Any
    sha256: str


def validate_document(name: DocumentName, text: str) -> ValidDocument:
    """`text` checked as a document of `name`'s kind; `DocumentInvalid` with every problem otherwise."""
    try:
        data = parse_yaml(text)
    except DocumentTextError as error:
        raise DocumentInvalid(name, error.problems) from None
    model_class = MODELS[name.kind]
    try:
        model = model_class.model_validate(data)
    except ValidationError as error:
        raise DocumentInvalid(name, problems_from(error, known_fields=_field_names(model_class))) from None
    return ValidDocument(name, text, model, sha256_of(text))


@cache
def _field_names(model_class: type[BaseModel]) -> frozenset[str]:
    return field_names_of(model_class)

"""Versioned configuration documents (pure): names, models, validation, text, seeds, templates.

Documents: `policy` (`PolicyDocument`, one section per concern), `cards` (`CardsDocument`, the
card catalog) and `templates/<name>` (`TemplateDocument`, submission defaults). Their storage
(S3 bucket versions + rows in schema `config` + `config.changed` events) is `services.config`.

Services turn the policy in force into a `Policy` with `scheduling_policy(document)` only, and the
catalog into a `Catalog` with `catalog_of(document, version)` only.
"""

from shared.config.card_catalog import CardFigures, CardsDocument, catalog_of
from shared.config.checking import MODELS, DocumentInvalid, ValidDocument, validate_document
from shared.config.documents import (
    CARDS,
    POLICY,
    DocumentKind,
    DocumentName,
    UnknownDocumentError,
    parse_document_name,
    template_document,
)
from shared.config.policy import HeadroomShares, PolicyDocument, policy_document, scheduling_policy
from shared.config.seeds import cards_seed_text, policy_seed_text
from shared.config.submission_templates import (
    FoundTemplate,
    TemplateCall,
    TemplateDocument,
    TemplateLookup,
    apply_template,
    resolve_submission,
)
from shared.config.yaml_text import (
    DocumentTextError,
    set_values,
    sha256_of,
    strip_version_header,
    unified_diff,
    version_header,
)

__all__ = [
    "CARDS",
    "MODELS",
    "POLICY",
    "CardFigures",
    "CardsDocument",
    "DocumentInvalid",
    "DocumentKind",
    "DocumentName",
    "DocumentTextError",
    "FoundTemplate",
    "HeadroomShares",
    "PolicyDocument",
    "TemplateCall",
    "TemplateDocument",
    "TemplateLookup",
    "UnknownDocumentError",
    "ValidDocument",
    "apply_template",
    "cards_seed_text",
    "catalog_of",
    "parse_document_name",
    "policy_document",
    "policy_seed_text",
    "resolve_submission",
    "scheduling_policy",
    "set_values",
    "sha256_of",
    "strip_version_header",
    "template_document",
    "unified_diff",
    "validate_document",
    "version_header",
]

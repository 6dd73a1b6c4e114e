"""Templates (pure): parsing the call, precedence of the submission's own fields, pinning, problems."""

from __future__ import annotations

from typing import Any

import pytest

from shared.config import FoundTemplate, TemplateCall, TemplateDocument, resolve_submission, template_document, validate_document
from shared.config.submission_templates import parse_call, unknown_template
from shared.submission import Problem, validate_submission

TEMPLATE = """description: fine-tuning on one H100 node
defaults:
  project: llm
  priority_class: standard
  gpus: 8
  estimate_gpu_hours: 16
  profile: compute
  card_types: {allow: [H100]}
  env: {NCCL_DEBUG: WARN, WANDB_MODE: offline}
  labels: {team: llm}
"""
STORE = {("llm-finetune", 1): "defaults: {project: llm}\n", ("llm-finetune", 2): TEMPLATE}


def lookup(call: TemplateCall) -> FoundTemplate | Problem:
    versions = sorted(v for name, v in STORE if name == call.name)
    version = call.version if call.version is not None else (versions[-1] if versions else None)
    if version not in versions:
        return unknown_template(call, len(versions))
    document = validate_document(template_document(call.name), STORE[(call.name, version)]).model
    return FoundTemplate(call.name, version, document)


def resolve(raw: dict[str, Any]) -> tuple[Any, list[Problem]]:
    return resolve_submission(raw, lookup)


def test_the_submissions_own_fields_win_and_env_and_labels_merge_key_by_key() -> None:
    raw = {"name": "ft run 3", "template": "llm-finetune@2", "gpus": 4, "env": {"NCCL_DEBUG": "INFO"},
           "labels": {"run": "3"}}

    merged, problems = resolve(raw)
    submission = validate_submission(merged)

    assert problems == []
    assert (submission.gpus, submission.project, submission.estimate_gpu_hours) == (4, "llm", 16)
    assert submission.env == {"NCCL_DEBUG": "INFO", "WANDB_MODE": "offline"}
    assert submission.labels == {"team": "llm", "run": "3"}
    assert submission.card_types is not None and submission.card_types.allow == ("H100",)
    assert submission.template == "llm-finetune@2"


def test_a_name_without_version_is_pinned_to_the_latest() -> None:
    merged, _ = resolve({"name": "x", "template": "llm-finetune"})
    assert merged["template"] == "llm-finetune@2"


def test_an_older_version_can_be_named_and_is_validated_as_a_whole() -> None:
    merged, problems = resolve({"name": "x", "template": "llm-finetune@1"})
    assert problems == [] and merged["template"] == "llm-finetune@1"
    missing = {p.field for p in _problems_of(merged)}
    assert {"priority_class", "gpus", "estimate_gpu_hours", "profile"} <= missing


@pytest.mark.parametrize(("call", "expected"), [
    ("llm-finetune@9", "a version of template 'llm-finetune' between 1 and 2"),
    ("nope", "a known template: there is no template 'nope'"),
    ("nope@1", "a known template: there is no template 'nope'"),
    ("llm-finetune@latest", "a template name, or name@version"),
    (7, "a template name, or name@version"),
])
def test_unknown_templates_and_versions_are_problems_naming_the_field(call: Any, expected: str) -> None:
    merged, problems = resolve({"name": "x", "template": call})
    [problem] = problems
    assert problem.field == "template" and expected in problem.expected and merged["template"] == call


def test_a_submission_without_template_is_untouched() -> None:
    raw = {"name": "x"}
    assert resolve(raw) == (raw, [])


def test_a_template_may_not_set_the_reference_or_an_idempotency_key() -> None:
    with pytest.raises(Exception, match="idempotency_key"):
        TemplateDocument.model_validate({"defaults": {"idempotency_key": "k"}})
    with pytest.raises(Exception, match="template"):
        TemplateDocument.model_validate({"defaults": {"template": "a@1"}})


def test_template_defaults_follow_the_submission_rules() -> None:
    with pytest.raises(Exception) as refused:
        validate_document(template_document("t"), "defaults: {gpus: 0, priority_class: urgent, gpu: 1}\n")
    fields = {p.field for p in refused.value.problems}  # type: ignore[attr-defined]
    assert fields == {"defaults.gpus", "defaults.priority_class", "defaults.gpu"}


def test_parse_call() -> None:
    assert parse_call("a@3") == TemplateCall("a", 3)
    assert parse_call("a") == TemplateCall("a", None)


def _problems_of(raw: dict[str, Any]) -> list[Problem]:
    from shared.submission import SubmissionInvalid

    try:
        validate_submission(raw)
    except SubmissionInvalid as invalid:
        return invalid.problems
    return []


def test_the_template_example_of_the_submission_guide_is_a_valid_template() -> None:
    import re
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[3] / "docs" / "submission.md").read_text(encoding="utf-8")
    [example] = re.findall(r"```yaml template\n(.*?)```", guide, flags=re.S)
    document = validate_document(template_document("llm-finetune"), example).model
    merged, problems = resolve_submission({"name": "run", "template": "llm-finetune"},
                                          lambda call: FoundTemplate(call.name, 2, document))
    assert problems == [] and validate_submission(merged).template == "llm-finetune@2"

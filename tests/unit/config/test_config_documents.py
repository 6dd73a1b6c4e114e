"""Documents (pure): names, the policy model and its Policy, the cards model, validation, text edits."""

from __future__ import annotations

import pytest

from shared.cards import load_catalog
from shared.config import (
    CARDS,
    POLICY,
    DocumentInvalid,
    DocumentTextError,
    HeadroomShares,
    PolicyDocument,
    UnknownDocumentError,
    catalog_of,
    cards_seed_text,
    parse_document_name,
    policy_seed_text,
    scheduling_policy,
    set_values,
    strip_version_header,
    template_document,
    unified_diff,
    validate_document,
    version_header,
)
from shared.scheduling.headroom import headroom_share
from shared.scheduling.policies import POLICIES


@pytest.mark.parametrize(("text", "name", "key"), [
    ("policy", "policy", "policy.yaml"),
    ("cards", "cards", "cards.yaml"),
    ("templates/llm-finetune", "templates/llm-finetune", "templates/llm-finetune.yaml"),
])
def test_document_names_and_their_object_keys(text: str, name: str, key: str) -> None:
    parsed = parse_document_name(text)
    assert (parsed.name, parsed.object_key) == (name, key)


@pytest.mark.parametrize("text", ["", "polcy", "templates/", "templates/../x", "templates/a b"])
def test_unknown_document_names_are_refused(text: str) -> None:
    with pytest.raises(UnknownDocumentError):
        parse_document_name(text)


@pytest.mark.parametrize("preset", sorted(POLICIES))
def test_every_preset_survives_its_seed_document(preset: str) -> None:
    text = policy_seed_text(POLICIES[preset], f"preset {preset}")
    assert scheduling_policy(validate_document(POLICY, text).model, name=preset) == POLICIES[preset]


def test_an_empty_policy_document_means_the_cardflow_preset() -> None:
    assert scheduling_policy(validate_document(POLICY, "").model) == POLICIES["cardflow"]


def test_the_headroom_section_switches_the_standard_fillers() -> None:
    """On in the cardflow preset since session 21; a document written before the fields existed means on too."""
    assert POLICIES["cardflow"].checkpointing_standard_borrows
    text = "headroom:\n  checkpointing_standard_borrows: false\n  fillers_yield_at_once: false\n"
    policy = scheduling_policy(validate_document(POLICY, text).model)
    assert (policy.checkpointing_standard_borrows, policy.fillers_yield_at_once, policy.fillers_after_opportunistic) == (
        False, False, True)


def test_headroom_per_card_type_falls_back_to_the_default_for_types_not_named() -> None:
    document = PolicyDocument.model_validate({"headroom": {"default": 0.1, "per_card_type": {"H100": 0.25}}})
    policy = scheduling_policy(document)

    assert isinstance(policy.headroom, HeadroomShares)
    assert (headroom_share(policy, "H100"), headroom_share(policy, "L40S")) == (0.25, 0.1)
    assert scheduling_policy(validate_document(POLICY, policy_seed_text(policy, "x")).model) == policy


def test_a_bad_policy_lists_every_problem_with_field_value_and_expected() -> None:
    text = "queue:\n  order: lifo\n  aging_per_hour: -1\nheadroom: {default: 2, per_card_type: {H100: 1.5}}\npreemtion: {}\n"
    with pytest.raises(DocumentInvalid) as refused:
        validate_document(POLICY, text)
    problems = {p.field: (p.value, p.expected) for p in refused.value.problems}
    assert problems == {
        "queue.order": ("lifo", "one of 'cardflow', 'priority' or 'fifo'"),
        "queue.aging_per_hour": (-1, "a number of at least 0.0"),
        "headroom.default": (2, "a number of at most 1.0"),
        "headroom.per_card_type.H100": (1.5, "a number of at most 1.0"),
        "preemtion": ({}, "no such field: remove it (did you mean 'preemption'?)"),
    }


@pytest.mark.parametrize(("text", "expected"), [
    ("queue: [1, 2", "valid YAML"),
    ("- a list\n", "a YAML mapping"),
])
def test_text_that_is_not_a_yaml_mapping_is_one_problem(text: str, expected: str) -> None:
    with pytest.raises(DocumentInvalid) as refused:
        validate_document(POLICY, text)
    [problem] = refused.value.problems
    assert problem.field == "(whole document)" and expected in problem.expected


def test_the_packaged_catalog_is_version_1_of_cards_and_makes_the_same_catalog() -> None:
    document = validate_document(CARDS, cards_seed_text()).model
    catalog, packaged = catalog_of(document, 1), load_catalog()

    assert catalog.version == "1"
    assert (dict(catalog.cards), catalog.reference, catalog.currency) == (dict(packaged.cards), packaged.reference, packaged.currency)


def test_a_bad_catalog_names_the_card_and_figure() -> None:
    text = cards_seed_text().replace("price_per_gpu_hour: 12.29", "price_per_gpu_hour: 0").replace(
        "gpus_per_node: 8          # HGX H100", "gpus_per_node: eight  # HGX H100")
    with pytest.raises(DocumentInvalid) as refused:
        validate_document(CARDS, text)
    problems = {p.field: p.expected for p in refused.value.problems}
    assert problems == {"cards.H100.price_per_gpu_hour": "a number greater than 0.0", "cards.H100.gpus_per_node": "a whole number"}


def test_the_reference_card_must_be_in_the_catalog() -> None:
    with pytest.raises(DocumentInvalid) as refused:
        validate_document(CARDS, cards_seed_text().replace("reference: A100-80G", "reference: A100-96G"))
    [problem] = refused.value.problems
    assert problem.field == "reference" and problem.expected.startswith("one of the catalog's card types (A10, A100-40G")


def test_set_values_changes_only_the_named_keys_and_keeps_comments_and_order() -> None:
    text = "# why: launch week\nqueue:\n  order: cardflow  # keep\n  aging_per_hour: 1.0\nheadroom:\n  default: 0.1\n"

    edited = set_values(text, ["queue.aging_per_hour=2.5", "headroom.per_card_type.H100=0.25", "quota.expiry_gate=false"])

    assert edited == (
        "# why: launch week\nqueue:\n  order: cardflow  # keep\n  aging_per_hour: 2.5\nheadroom:\n  default: 0.1\n"
        "  per_card_type:\n    H100: 0.25\nquota:\n  expiry_gate: false\n"
    )


def test_set_values_writes_null_as_the_seeded_documents_do_so_a_diff_shows_only_the_change() -> None:
    seeded = policy_seed_text(POLICIES["cardflow"], "preset cardflow")
    assert "max_lost_gpu_hours: null" in seeded

    edited = set_values(seeded, ["headroom.default=0.25", "queue.aging_per_hour=null"])

    assert "max_lost_gpu_hours: null\n" in edited and "aging_per_hour: null\n" in edited
    changed = [line for line in unified_diff(seeded, edited, "policy", "v1", "v2").splitlines()
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]  # fmt: skip
    assert changed == ["-  aging_per_hour: 1.0", "+  aging_per_hour: null", "-  default: 0.1", "+  default: 0.25"]


@pytest.mark.parametrize(("assignment", "field"), [("queue.order", "queue.order"), ("=1", "=1"), ("a..b=1", "a..b")])
def test_malformed_assignments_are_refused(assignment: str, field: str) -> None:
    with pytest.raises(DocumentTextError) as refused:
        set_values("queue: {}\n", [assignment])
    assert refused.value.problems[0].field == field


def test_setting_below_a_scalar_is_refused() -> None:
    with pytest.raises(DocumentTextError, match="queue.order"):
        set_values("queue:\n  order: cardflow\n", ["queue.order.x=1"])


def test_the_version_header_of_show_is_stripped_on_apply_and_names_the_base() -> None:
    body = "queue:\n  order: fifo\n"
    assert strip_version_header(version_header("policy", 7) + body) == (body, 7)
    assert strip_version_header(body) == (body, None)


def test_unified_diff_labels_versions() -> None:
    diff = unified_diff("a: 1\n", "a: 2\n", "policy", "v1", "v2")
    assert diff.splitlines()[:2] == ["--- policy@v1", "+++ policy@v2"]
    assert unified_diff("a: 1\n", "a: 1\n", "policy", "v1", "v2") == ""


def test_template_names_are_checked() -> None:
    assert template_document("llm-finetune").name == "templates/llm-finetune"
    with pytest.raises(UnknownDocumentError):
        template_document("-bad")

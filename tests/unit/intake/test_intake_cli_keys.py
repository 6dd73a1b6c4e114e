"""`cardflow submit`'s derived idempotency keys (pure)."""

from __future__ import annotations

from services.cli.submit import derive_key, with_key


def test_a_derived_key_depends_on_content_only() -> None:
    one = {"name": "a", "gpus": 2, "labels": {"x": "1", "y": "2"}}
    same = {"labels": {"y": "2", "x": "1"}, "gpus": 2, "name": "a"}
    other = {"name": "a", "gpus": 3, "labels": {"x": "1", "y": "2"}}
    assert derive_key(one) == derive_key(same) != derive_key(other)
    assert derive_key(one).startswith("cli-") and len(derive_key(one)) == 36


def test_a_submission_keeps_its_own_key() -> None:
    assert with_key({"name": "a", "idempotency_key": "mine"})["idempotency_key"] == "mine"
    assert with_key({"name": "a", "idempotency_key": None})["idempotency_key"] == derive_key({"name": "a", "idempotency_key": None})
    assert with_key({"name": "a"})["idempotency_key"] == derive_key({"name": "a"})


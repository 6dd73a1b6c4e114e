"""The permission rule of shared/identity.py, as a table: who may act as which role on which project."""

from __future__ import annotations

import pytest

from shared.identity import (
    TOKEN_PREFIX,
    PermissionDenied,
    Principal,
    Role,
    check_token_name,
    hash_token,
    needed,
    permits,
    require,
    token_hint,
)

ALICE_NLP = Principal("alice", Role.SUBMITTER, "nlp")
BOB = Principal("bob", Role.SUBMITTER)
OPS_NLP = Principal("ops-nlp", Role.OPERATOR, "nlp")
OPS = Principal("ops", Role.OPERATOR)
REVIEWER = Principal("rita", Role.REVIEWER)
AUDITOR = Principal("audrey", Role.AUDITOR)
ADMIN = Principal("root", Role.ADMIN)

# (principal, role needed, project of the action, permitted?)
CASES = [
    (ALICE_NLP, Role.SUBMITTER, "nlp", True),
    (ALICE_NLP, Role.SUBMITTER, "cv", False),  # a submitter of A may not act on B
    (ALICE_NLP, Role.SUBMITTER, None, False),  # nor on what is not about one project
    (ALICE_NLP, Role.OPERATOR, "nlp", False),
    (BOB, Role.SUBMITTER, "cv", True),  # unscoped: every project
    (BOB, Role.SUBMITTER, None, True),
    (BOB, Role.OPERATOR, None, False),
    (OPS, Role.SUBMITTER, "nlp", True),  # operator covers submitter
    (OPS, Role.OPERATOR, None, True),
    (OPS, Role.REVIEWER, None, False),  # approving stays a separate duty
    (OPS, Role.AUDITOR, None, False),
    (OPS_NLP, Role.SUBMITTER, "nlp", True),
    (OPS_NLP, Role.SUBMITTER, "cv", False),
    (OPS_NLP, Role.OPERATOR, None, False),  # a policy change or quota grant is not about one project
    (REVIEWER, Role.REVIEWER, "nlp", True),
    (REVIEWER, Role.SUBMITTER, "nlp", False),
    (AUDITOR, Role.AUDITOR, None, True),
    (AUDITOR, Role.SUBMITTER, "nlp", False),
    (AUDITOR, Role.ADMIN, None, False),
    (OPS, Role.ADMIN, None, False),
    *[(ADMIN, role, project, True) for role in Role for project in (None, "nlp")],
]


@pytest.mark.parametrize(("principal", "role", "project", "expected"), CASES)
def test_permits(principal: Principal, role: Role, project: str | None, expected: bool) -> None:
    assert permits(principal, role, project) is expected
    if expected:
        assert require(principal, role, project) is principal
    else:
        with pytest.raises(PermissionDenied):
            require(principal, role, project)


def test_the_refusal_names_the_missing_role_in_one_line() -> None:
    with pytest.raises(PermissionDenied) as refused:
        require(ALICE_NLP, Role.SUBMITTER, "cv")
    message = str(refused.value)
    assert message == (
        "forbidden: this needs role submitter for project cv (or operator, admin); "
        "token 'alice' (submitter for project nlp) does not have it"
    )
    assert "\n" not in message

    with pytest.raises(PermissionDenied) as refused:
        require(AUDITOR, Role.OPERATOR)
    assert str(refused.value) == "forbidden: this needs role operator (or admin); token 'audrey' (auditor) does not have it"

    with pytest.raises(PermissionDenied) as refused:
        require(OPS_NLP, Role.OPERATOR)
    assert "role operator not limited to a project (or admin)" in str(refused.value)


def test_needed_lists_the_roles_that_cover_one() -> None:
    assert needed(Role.ADMIN) == "role admin"
    assert needed(Role.REVIEWER, "x") == "role reviewer for project x (or admin)"


def test_actor_is_the_token_name() -> None:
    assert ALICE_NLP.actor == "user:alice"


def test_tokens_are_stored_as_sha256_and_shown_as_a_hint() -> None:
    token = TOKEN_PREFIX + "abcdefghijkl"
    assert hash_token(token) == "b57e9ed9c9426ce850aee813fc8e18d6c0b59d9cf1f9497c24e55bd92ff1cdf2"  # sha256sum of the text
    assert token_hint(token) == "cfk_abcd…"


@pytest.mark.parametrize("name", ["alice", "ci-bot", "a.b_c@d", "A1", "x" * 64])
def test_valid_token_names(name: str) -> None:
    assert check_token_name(name) == name


@pytest.mark.parametrize("name", ["", "-lead", "has space", "colon:name", "x" * 65, "ümlaut"])
def test_invalid_token_names_are_refused_with_what_is_allowed(name: str) -> None:
    with pytest.raises(ValueError, match="1-64 characters"):
        check_token_name(name)

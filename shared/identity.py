"""Who is asking and what they may do: roles, principals and the one permission rule (pure).

    principal = Principal("alice", Role.SUBMITTER, project="nlp")
    permits(principal, Role.SUBMITTER, project="nlp")   # True
    require(principal, Role.SUBMITTER, project="cv")    # raises PermissionDenied naming what is missing

The rule (docs/identity.md has the table of actions):

- `admin` may do everything (and is never limited to a project);
- a role also covers the roles listed for it in `COVERS`: `operator` covers `submitter`;
  `reviewer` and `auditor` cover only themselves (approving and auditing stay separate duties);
- a principal limited to a project may act only on that project: `project=None` means an action
  that is not about one project (a policy change, a quota grant), which needs an unscoped principal.

Tokens are random secrets; only their SHA-256 is stored (`hash_token`). A token is long and random,
so a plain hash is enough (no password stretching), and lookups by hash need no secret comparison.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a token may do (each role's duties are in docs/identity.md)."""

    SUBMITTER = "submitter"  # submit tasks, cancel tasks (of its project, if it has one)
    OPERATOR = "operator"  # everything a submitter may, plus quotas, policy and configuration
    REVIEWER = "reviewer"  # approve or refuse tasks that need approval, review matches
    AUDITOR = "auditor"  # read audit data: the archive, replays, verifications
    ADMIN = "admin"  # everything, including tokens


COVERS: dict[Role, frozenset[Role]] = {
    Role.SUBMITTER: frozenset({Role.SUBMITTER}),
    Role.OPERATOR: frozenset({Role.OPERATOR, Role.SUBMITTER}),
    Role.REVIEWER: frozenset({Role.REVIEWER}),
    Role.AUDITOR: frozenset({Role.AUDITOR}),
    Role.ADMIN: frozenset(Role),
}
"""Role held -> the roles it acts as."""

TOKEN_PREFIX = "cfk_"
TOKEN_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
"""A token's name is the actor's name (`user:<name>`): letters, digits, `.`, `_`, `@`, `-`; 1-64 characters."""

USER_ACTOR_PREFIX = "user:"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated token holder. `project` None = not limited to one project."""

    name: str
    role: Role
    project: str | None = None

    @property
    def actor(self) -> str:
        """What events record as their `actor`."""
        return f"{USER_ACTOR_PREFIX}{self.name}"

    def describe(self) -> str:
        """`token 'alice' (submitter for project nlp)`: how messages name this principal."""
        scope = f" for project {self.project}" if self.project else ""
        return f"token {self.name!r} ({self.role.value}{scope})"


class PermissionDenied(Exception):
    """A principal lacks the role (or the project) an action needs; the message says which, in one line."""

    def __init__(self, principal: Principal, role: Role, project: str | None) -> None:
        self.principal, self.role, self.project = principal, role, project
        wanted = needed(role, project, unscoped=project is None and principal.project is not None and role is not Role.ADMIN)
        super().__init__(f"forbidden: this needs {wanted}; {principal.describe()} does not have it")


def permits(principal: Principal, role: Role, project: str | None = None) -> bool:
    """May `principal` act as `role` on `project` (None: an action not about one project)?"""
    if principal.role is Role.ADMIN:
        return True
    if role not in COVERS[principal.role]:
        return False
    return principal.project is None or principal.project == project


def require(principal: Principal, role: Role, project: str | None = None) -> Principal:
    """`principal` if it `permits` the action, else `PermissionDenied` naming the missing role."""
    if not permits(principal, role, project):
        raise PermissionDenied(principal, role, project)
    return principal


def needed(role: Role, project: str | None = None, *, unscoped: bool = False) -> str:
    """What an action needs, in words: `role operator (or admin)`, `role submitter for project nlp
    (or operator, admin)`; `unscoped` adds "not limited to a project" (for a project-limited token)."""
    others = [r.value for r in Role if r is not role and role in COVERS[r]]
    scope = f" for project {project}" if project else " not limited to a project" if unscoped else ""
    return f"role {role.value}{scope}" + (f" (or {', '.join(others)})" if others else "")


def hash_token(token: str) -> str:
    """The stored form of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_hint(token: str) -> str:
    """The first characters of a token, safe to show in listings (`cfk_Ab12…`)."""
    return token[: len(TOKEN_PREFIX) + 4] + "…"


def check_token_name(name: str) -> str:
    """`name` if it may name a token, else ValueError saying what a name may contain."""
    if not TOKEN_NAME_PATTERN.match(name):
        raise ValueError(
            f"token name {name!r} is not allowed: 1-64 characters, letters, digits, '.', '_', '@' or '-',"
            " starting with a letter or digit"
        )
    return name

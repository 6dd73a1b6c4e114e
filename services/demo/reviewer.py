"""The demo's reviewer: a reviewer token made through the identity API, its decisions through the approvals API.

- `demo_reviewer_token(api, admin_token, token_file)`: the token kept in `token_file` (0600, beside
  the local admin's) while it is still an active reviewer's (`GET /v1/whoami`); otherwise the local
  admin creates one (`POST /v1/tokens`: name `DEMO_REVIEWER`, role reviewer, with a reason: a
  `token.created` event, actor the admin) and it is written there.
- `policy_in_force(api, token)`: True once the policy in force holds the demo's approval rule (the
  demo submits only then, so its big core tasks are held for the reviewer, not started at once).
- `DemoReviewer.step(views, now)`: each `DEMO_REVIEWS` task that has waited for approval
  `after_s` seconds gets its decision, `POST /v1/tasks/{id}/approve|deny {"reason"}` with the
  reviewer's token: the console records `task.reviewed` with actor `user:demo-reviewer` and the
  dispatcher carries it out (`task.approved`, or `task.denied` + `task.cancelled`). Returns a note
  per decision for the live view.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import httpx

from services.cli.lang import CliLang
from services.console.routes.approvals import awaits_approval  # what the API accepts a review for
from services.demo.workload import DEMO_REVIEWS, DemoReview
from shared.config.demo_policy import DEMO_APPROVAL_RULE, DEMO_REVIEWER
from shared.task_view import TaskView

REVIEWER_TOKEN_FILE = "demo-reviewer.token"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def demo_reviewer_token(api: httpx.AsyncClient, admin_token: str, token_file: Path) -> str:
    """The demo reviewer's token (see the module docstring)."""
    from shared.embedded.credentials import write_private

    if token_file.exists():
        kept = token_file.read_text().strip()
        answer = await api.get("/v1/whoami", headers=bearer(kept))
        if answer.status_code == 200 and answer.json().get("role") == "reviewer":
            return kept
    answer = await api.post("/v1/tokens", headers=bearer(admin_token), json={
        "name": DEMO_REVIEWER, "role": "reviewer",
        "reason": "cardflow up --demo: the demo's reviewer, who approves or denies its big core tasks"})  # fmt: skip
    answer.raise_for_status()
    secret = answer.json()["secret"]
    write_private(token_file, secret + "\n")
    return secret


async def policy_in_force(api: httpx.AsyncClient, token: str) -> bool:
    """True when the policy in force names the demo's approval rule."""
    from shared.config import POLICY, validate_document

    answer = await api.get("/v1/config/show", params={"name": "policy"}, headers=bearer(token))
    if answer.status_code != 200:
        return False
    document = validate_document(POLICY, answer.json()["content"]).model
    return any(rule.name == DEMO_APPROVAL_RULE["name"] for rule in document.approvals.rules)


REVIEW_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {"approve": "{reviewer} approved {task}: {reason}", "deny": "{reviewer} denied {task}: {reason}",
                 "refused": "{reviewer} could not {decision} {task}: HTTP {status} {text}"},
    CliLang.ZH: {"approve": "{reviewer} 批准了 {task}：{reason}", "deny": "{reviewer} 拒绝了 {task}：{reason}",
                 "refused": "{reviewer} 未能对 {task} 执行 {decision}：HTTP {status} {text}"},
}  # fmt: skip
"""The reviewer's notes per language (the reason is the demo reviewer's own words, recorded as given)."""


class DemoReviewer:
    """Carries out `DEMO_REVIEWS` once each task has waited for approval long enough to be seen waiting."""

    def __init__(self, api: httpx.AsyncClient, token: str, reviews: Iterable[DemoReview] = DEMO_REVIEWS,
                 lang: CliLang = CliLang.EN) -> None:  # fmt: skip
        self.api, self.token, self.lang = api, token, lang
        self.pending = {review.name: review for review in reviews}
        self.waiting_since: dict[str, float] = {}

    async def step(self, views: Iterable[TaskView], now: float) -> list[str]:
        """Decide what is due; a note per decision (or refusal) for the live view."""
        notes = []
        for view in views:
            review = self.pending.get(view.name or "")
            if review is None or not awaits_approval(view):
                continue
            since = self.waiting_since.setdefault(view.id, now)
            if now - since < review.after_s:
                continue
            del self.pending[review.name]
            notes.append(await self.decide(view, review))
        return notes

    async def decide(self, view: TaskView, review: DemoReview) -> str:
        answer = await self.api.post(f"/v1/tasks/{view.id}/{review.decision.value}", headers=bearer(self.token),
                                     json={"reason": review.reason})  # fmt: skip
        words = REVIEW_WORDS[self.lang]
        if answer.status_code != 202:
            return words["refused"].format(reviewer=DEMO_REVIEWER, decision=review.decision.value, task=review.name,
                                           status=answer.status_code, text=answer.text[:200])  # fmt: skip
        return words[review.decision.value].format(reviewer=answer.json()["reviewer"], task=review.name, reason=review.reason)

"""`cardflow submit FILE [--wait]` and `cardflow cancel TASK --reason`: API clients of the console.

`submit` sends each submission of the file as `POST /v1/tasks` with the caller's token, so it is
validated at once: the table says for each whether it became a task, was submitted before (same
idempotency key) or was rejected, with every problem. A submission without an `idempotency_key`
gets one derived from its content (`cli-<sha256 prefix>`), so running the same command again never
creates a second task: the answer says "already submitted as T; --new to submit again", and `--new`
derives a fresh key (content + the time) so the same file becomes new tasks.

`--wait` then polls `GET /v1/tasks/{id}` until every task has ended or is stuck — cannot go on until
a person acts: no card type fits (`unmatchable`), or held for approval, quota, a deadline or by an
operator (a hold `DeferralReason`, except a quota window that has not started yet). Exit codes:
0 all succeeded; 1 some failed, were rejected or cancelled; 2 the timeout passed first; 3 the token
was refused (401/403: nothing submitted); 4 none failed but some are stuck (the table says why).

`--lang zh` (or `CARDFLOW_LANG=zh`) prints the tables and answers in Chinese: states and reasons by
their Chinese names (services/console/labels.py); a problem's field name stays, and its English
expectation (the API's) is shown as it is, marked 原文. Once `--wait` stops, each task still waiting
is told by its story's Chinese sentence (`GET /v1/tasks/{id}/story?lang=zh`, as `cardflow status`
tells it), the English detail beside it marked 原文 only where the sentence says less.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn
from rich.table import Table

from services.cli.client import ApiClient, cli_api
from services.cli.lang import CliLang, LangOption
from services.cli.task_refs import TaskArgument

console = Console()
errors = Console(stderr=True, soft_wrap=True)

KEY_PREFIX = "cli-"
POLL_SECONDS = 0.5
EXIT_NOT_ALL_SUCCEEDED = 1
EXIT_TIMED_OUT = 2
EXIT_STUCK = 4
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "rejected"})

WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "submitted": "submitted", "#": "#", "name": "name", "project": "project", "gpus": "gpus",
        "idempotency key": "idempotency key", "task id": "task id", "outcome": "outcome",
        "created": "created", "submitted before": "submitted before", "rejected": "rejected", "conflict": "conflict",
        "problem": "{field}: {expected} (got {value!r})", "short_problem": "{field}: {expected}",
        "again_derived": "already submitted as {task}; --new to submit again",
        "again_own": "already submitted as {task} (same idempotency_key: give a new one to submit again)",
        "tasks": "tasks", "state": "state", "why": "why", "stuck": " (stuck)", "not seen": "not seen",
        "not seen yet": "not seen yet", "sent": "sent", "no_card_fits": "no card type fits",
        "timed_out": "timed out after {timeout:g} s: some tasks have not ended yet",
        "stuck_line": "{n} task(s) cannot go on until a person acts (exit {code}): {listed}",
        "cancelled": "cancel of {task} requested", "file_error": "{error}",
    },
    CliLang.ZH: {
        "submitted": "提交结果", "#": "#", "name": "名称", "project": "项目", "gpus": "GPU 数",
        "idempotency key": "幂等键", "task id": "任务 ID", "outcome": "结果",
        "created": "已创建任务", "submitted before": "已提交过", "rejected": "已拒绝", "conflict": "冲突",
        "problem": "{field}：收到 {value!r}，应为 {expected}（原文）", "short_problem": "{field}：应为 {expected}（原文）",
        "again_derived": "已提交过，任务为 {task}；用 --new 再次提交",
        "again_own": "已提交过，任务为 {task}（idempotency_key 相同：换一个新的才能再次提交）",
        "tasks": "任务", "state": "状态", "why": "原因", "stuck": "（需人工处理）", "not seen": "尚未看到",
        "not seen yet": "尚未看到", "sent": "已发送", "no_card_fits": "没有合适的卡型",
        "timed_out": "等待 {timeout:g} 秒后超时：部分任务尚未结束",
        "stuck_line": "{n} 个任务需要有人处理才能继续（退出码 {code}）：{listed}",
        "cancelled": "已请求取消任务 {task}", "file_error": "无法读取提交文件：{error}（原文）",
    },
}  # fmt: skip
"""The words of `submit` and `cancel` per language; a test checks both tables have the same keys."""


def derive_key(raw: dict[str, Any]) -> str:
    """A key that depends only on the submission's content (canonical JSON, sorted keys)."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def with_key(raw: dict[str, Any], fresh: str | None = None) -> dict[str, Any]:
    """`raw` with an idempotency key: its own when it has one, else `derive_key(raw)`; with `fresh`
    (`--new`: e.g. the time) a key derived from the content and `fresh`, so it is a new task."""
    if raw.get("idempotency_key") is not None:
        return raw
    return {**raw, "idempotency_key": derive_key(raw if fresh is None else {"submission": raw, "new": fresh})}


def is_derived(raw: dict[str, Any]) -> bool:
    return str(raw.get("idempotency_key", "")).startswith(KEY_PREFIX)


@dataclass(frozen=True)
class Sent:
    """What the API answered for one submission."""

    raw: dict[str, Any]
    task_id: str | None
    outcome: str  # created | submitted before | rejected | conflict
    problems: list[dict[str, Any]]

    @property
    def accepted(self) -> bool:
        return self.outcome in ("created", "submitted before")


def send(api: ApiClient, raw: dict[str, Any]) -> Sent:
    """POST one submission; 201 created, 200 the key was used before, 409/422 rejected with problems."""
    response = api.call("POST", "/v1/tasks", body=raw, expect=(409, 422))
    answer = response.json()
    if response.status_code in (409, 422):
        outcome = "conflict" if response.status_code == 409 else "rejected"
        return Sent(raw, answer.get("task_id"), outcome, answer.get("problems", []))
    return Sent(raw, answer["task_id"], "created" if answer["created"] else "submitted before", [])


def sent_table(sent: Sequence[Sent], lang: CliLang = CliLang.EN) -> Table:
    words = WORDS[lang]
    table = Table(title=words["submitted"])
    for column in ("#", "name", "project", "gpus", "idempotency key", "task id", "outcome"):
        table.add_column(words[column], overflow="fold")
    for index, item in enumerate(sent, start=1):
        outcome = words[item.outcome] + "".join(f"\n{words['problem'].format(**p)}" for p in item.problems)
        cells = (_cell(item.raw.get(f)) for f in ("name", "project", "gpus", "idempotency_key"))
        table.add_row(str(index), *cells, item.task_id or "", _explained(item, outcome, words))
    return table


def _explained(item: Sent, outcome: str, words: dict[str, str]) -> str:
    """A repeat says which task it is and how to submit again."""
    if item.outcome != "submitted before":
        return outcome
    return words["again_derived" if is_derived(item.raw) else "again_own"].format(task=item.task_id)


def stuck_because(view: dict[str, Any], lang: CliLang = CliLang.EN) -> str | None:
    """Why an unfinished task cannot go on until a person acts (module docstring), or None. In English
    the API's sentence; in Chinese the reason's Chinese name and its story's sentence once fetched
    (`with_story_sentences`; before that, the API's English sentence marked 原文)."""
    from shared.scheduling.model import DeferralReason, WaitKind

    if view.get("state") == "unmatchable":
        return _reason(view, WORDS[lang]["no_card_fits"], lang)
    if view.get("state") != "held":
        return None
    try:
        reason = DeferralReason(view.get("reason"))
    except ValueError:
        return None
    if reason.kind is not WaitKind.HOLD or reason is DeferralReason.QUOTA_NOT_YET_VALID:
        return None
    return _reason(view, reason.value, lang)


STORY_SENTENCE = "story_sentence"
"""Key `with_story_sentences` adds to a view: its story's sentence in Chinese, and whether the English
detail must stand beside it (`STORY_ORIGINAL_NEEDED`)."""
STORY_ORIGINAL_NEEDED = "story_original_needed"


def _reason(view: dict[str, Any], fallback: str, lang: CliLang) -> str:
    """The view's reason as said in `lang`: the API's English detail; in Chinese the reason's Chinese
    name, then its story's Chinese sentence if fetched (`with_story_sentences`), else that detail
    marked 原文 (as `cardflow status` and the demo's live view show it)."""
    from services.console.labels import reason_in_chinese, reason_label

    if lang is not CliLang.ZH:
        return view.get("reason_detail") or fallback
    if not view.get("reason"):
        return fallback
    if not view.get(STORY_SENTENCE):
        return reason_in_chinese(view["reason"], view.get("reason_detail"))
    original = view.get("reason_detail") if view.get(STORY_ORIGINAL_NEEDED) else None
    return f"{reason_label(view['reason'], 'zh')}：{view[STORY_SENTENCE]}" + (f"（原文：{original}）" if original else "")


def with_story_sentences(api: ApiClient, views: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each unfinished view with a reason, with its story's Chinese sentence added (the others as they are)."""
    told = dict(views)
    for index, view in views.items():
        if view.get("state") in TERMINAL_STATES or not view.get("reason") or not view.get("id"):
            continue
        found = api.call("GET", f"/v1/tasks/{view['id']}/story", expect=(404,), params={"lang": CliLang.ZH.value})
        if found.status_code == 200:
            story = found.json()
            told[index] = view | {STORY_SENTENCE: story.get("sentence"), STORY_ORIGINAL_NEEDED: story.get("original_needed")}
    return told


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def wait_for_tasks(api: ApiClient, sent: Sequence[Sent], timeout: float, lang: CliLang = CliLang.EN) -> int:
    """Poll each task until every one has ended or is stuck; the exit code (module docstring)."""
    views: dict[int, dict[str, Any]] = {i: {"state": "rejected", "id": s.task_id} for i, s in enumerate(sent) if not s.accepted}
    deadline = time.monotonic() + timeout
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.fields[state]}"),
                  console=console) as progress:  # fmt: skip
        rows = {i: progress.add_task(_cell(s.raw.get("name")) or s.task_id or "", total=1, state=WORDS[lang]["sent"])
                for i, s in enumerate(sent)}  # fmt: skip
        while not _all_settled(views, sent) and time.monotonic() < deadline:
            for index, item in enumerate(sent):
                if item.accepted and views.get(index, {}).get("state") not in TERMINAL_STATES:
                    response = api.call("GET", f"/v1/tasks/{item.task_id}", expect=(404,))
                    views[index] = response.json() if response.status_code == 200 else {}
                _show(progress, rows[index], views.get(index), lang)
            if not _all_settled(views, sent):
                time.sleep(POLL_SECONDS)
    if lang is CliLang.ZH:
        views = with_story_sentences(api, views)
    console.print(_result_table(sent, views, lang))
    return wait_outcome(views, len(sent), timeout, lang)


def wait_outcome(views: dict[int, dict[str, Any]], count: int, timeout: float, lang: CliLang = CliLang.EN) -> int:
    """The exit code of `--wait` once it stopped (module docstring), with a line on stderr unless 0."""
    words = WORDS[lang]
    states = [views.get(i, {}) for i in range(count)]
    if not _all_settled(views, range(count)):
        errors.print(words["timed_out"].format(timeout=timeout))
        return EXIT_TIMED_OUT
    if any(view.get("state") in TERMINAL_STATES - {"succeeded"} for view in states):
        return EXIT_NOT_ALL_SUCCEEDED
    stuck = [view for view in states if view.get("state") not in TERMINAL_STATES]
    if stuck:
        listed = "; ".join(f"{view.get('id')}: {stuck_because(view, lang)}" for view in stuck)
        errors.print(words["stuck_line"].format(n=len(stuck), code=EXIT_STUCK, listed=listed))
        return EXIT_STUCK
    return 0


def _all_settled(views: dict[int, dict[str, Any]], sent: Sequence[Any]) -> bool:
    """Every task has ended or is stuck."""
    return all((view := views.get(i, {})).get("state") in TERMINAL_STATES or (view and stuck_because(view))
               for i in range(len(sent)))  # fmt: skip


def _show(progress: Progress, row: Any, view: dict[str, Any] | None, lang: CliLang) -> None:
    if not view:
        progress.update(row, state=WORDS[lang]["not seen yet"])
        return
    state = view["state"]
    progress.update(row, state=f"{_state(state, lang)}: {_reason(view, view.get('reason') or '', lang)}"[:120],
                    completed=1 if state in TERMINAL_STATES else 0)  # fmt: skip


def _state(state: str, lang: CliLang) -> str:
    """The state's value in English (as the API says it), its Chinese name in Chinese."""
    from services.console.labels import state_label

    return state_label(state, "zh") if lang is CliLang.ZH else state


def _result_table(sent: Sequence[Sent], views: dict[int, dict[str, Any]], lang: CliLang = CliLang.EN) -> Table:
    words = WORDS[lang]
    table = Table(title=words["tasks"])
    for column in ("name", "task id", "state", "why"):
        table.add_column(words[column], overflow="fold")
    for index, item in enumerate(sent):
        view = views.get(index) or {}
        why = _reason(view, "", lang) or "; ".join(words["short_problem"].format(**p) for p in item.problems)
        state = _state(view["state"], lang) if "state" in view else words["not seen"]
        table.add_row(_cell(item.raw.get("name")), item.task_id or "", state + (words["stuck"] if view and stuck_because(view) else ""),
                      why)  # fmt: skip
    return table


def submit(
    file: Annotated[Path, typer.Argument(help="JSON or YAML file: one submission or a list of them", exists=True, dir_okay=False)],
    wait: Annotated[bool, typer.Option("--wait", help="wait until every task has ended or is stuck; exit 0 all succeeded, "
                                       "1 some failed, 2 timed out, 4 some cannot go on until a person acts (no card fits, held)")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds --wait waits at most (exit 2 after)")] = 600.0,
    new: Annotated[bool, typer.Option("--new", help="submit again even if the same content was submitted before (a fresh derived key)")] = False,
    lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Submit tasks from FILE through the API (needs role submitter for their project)."""
    from shared.submission import SubmissionFileError, load_submission_file

    fresh = str(time.time_ns()) if new else None
    try:
        submissions = [with_key(raw, fresh) for raw in load_submission_file(file)]
    except SubmissionFileError as error:
        errors.print(WORDS[lang]["file_error"].format(error=error), markup=False, highlight=False)
        raise typer.Exit(2) from None
    with cli_api(lang) as api:
        sent = [send(api, raw) for raw in submissions]
        console.print(sent_table(sent, lang))
        code = wait_for_tasks(api, sent, timeout, lang) if wait else 0
    if code or any(not item.accepted for item in sent):
        raise typer.Exit(code or EXIT_NOT_ALL_SUCCEEDED)


def cancel(
    task: TaskArgument,
    reason: Annotated[str, typer.Option("--reason", help="why, shown in the task's history")] = "",
    lang: LangOption = CliLang.EN,
) -> None:
    """Ask to cancel TASK (the dispatcher stops it); needs role submitter for the task's project."""
    from services.cli.task_refs import task_id_of

    with cli_api(lang) as api:
        task_id = task_id_of(api, task)
        api.post(f"/v1/tasks/{task_id}/cancel", {"reason": reason or None})
    console.print(WORDS[lang]["cancelled"].format(task=task_id if task == task_id else f"{task_id} ({task})"))


def register(app: typer.Typer) -> None:
    """Attach `submit` and `cancel`."""
    app.command("submit")(submit)
    app.command("cancel")(cancel)

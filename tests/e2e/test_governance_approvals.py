"""Approvals live, on the real servers with simulated agents: a task the policy's rules match is held
(no GPU, no quota) until a listed reviewer approves it, then runs; its submitter may not approve it,
nor may a reviewer the policy does not list; a denied task is cancelled; `cardflow check` tells why a
submission would be held, `cardflow queue` shows the queue."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.settings import Settings
from tests.helpers.console_server import serving_console
from tests.helpers.governance import bearer, cli, issue_tokens, json_of, set_policy
from tests.helpers.system import ALL_SERVICES, RunningSystem, running_system

@pytest.fixture
async def governed(fresh_settings: Settings, data_dir_factory: Callable[[], Path]) -> AsyncIterator[RunningSystem]:
    async with running_system(fresh_settings, data_dir_factory(), services=ALL_SERVICES) as system:
        yield system


def task(name: str, gpus: int, hours: float, **extra: Any) -> dict[str, Any]:
    return {"name": name, "project": "vision", "priority_class": "standard", "gpus": gpus, "min_vram_gb": 80,
            "estimate_gpu_hours": gpus * hours, "profile": "compute", **extra}


def held_for_approval(name: str) -> Callable[[RunningSystem], Any]:
    return lambda s: (v := s.task_by_name(name)) is not None and v.reason == "not_approved" and v


async def test_approval_gate_held_approved_runs_and_self_approval_is_refused(governed: RunningSystem,
                                                                             tmp_path: Path) -> None:
    system = governed
    system.start_agent("h100-a", "H100x8", time_scale=3600)
    await set_policy(system, "approvals.rules=[{name: big-h100, gpu_hours_above: 1}]",
                     "reviewers.by_project={vision: [rita]}", reason="big H100 work needs a reviewer")
    tokens = await issue_tokens(system.settings, {"rita": ("reviewer", None), "eve": ("reviewer", None),
                                                  "sam": ("submitter", "vision")})
    await system.wait_for(lambda s: s.of_type("node.registered"), timeout=120, what="the agent to register")
    await system.submit([task("big", gpus=8, hours=1.0), task("small", gpus=1, hours=0.5)])

    big = await system.wait_for(held_for_approval("big"), what="the big task held for approval")
    assert "rule big-h100" in big.reason_detail and "rita" in big.reason_detail
    await system.wait_for(lambda s: (v := s.task_by_name("small")) is not None and v.state.value == "succeeded",
                          what="the small task to run past the held one")
    assert not [e for e in system.of_type("lease.granted") if e.data.task_id == big.id]  # no GPU while it waits

    with serving_console(system.settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            # the admin submits a task of its own: an admin may approve others', never its own
            own = await http.post("/v1/tasks", json=task("mine", gpus=8, hours=1.0),
                                  headers=bearer(tokens["root"]) | {"x-cardflow-actor": "user:root"})
            assert own.status_code == 201, own.text
            mine = await system.wait_for(held_for_approval("mine"), what="the admin's task held for approval")
            refused = await http.post(f"/v1/tasks/{mine.id}/approve", json={"reason": "trust me"},
                                      headers=bearer(tokens["root"]))
            assert refused.status_code == 403 and "may not review their own task" in refused.json()["detail"]
            not_listed = await http.post(f"/v1/tasks/{big.id}/approve", json={"reason": "looks fine"},
                                         headers=bearer(tokens["eve"]))
            assert not_listed.status_code == 403 and "the reviewers of project vision are rita" in not_listed.text
            submitter = await http.post(f"/v1/tasks/{big.id}/approve", json={"reason": "please"},
                                        headers=bearer(tokens["sam"]))
            assert submitter.status_code == 403

            check = cli(url, tokens["sam"], "check", str(_write(tmp_path, task("another-big", 8, 1.0))), "--json")
            assert check.exit_code == 4, check.output
            approval = next(c for c in json_of(check)["checks"] if c["check"] == "approval")
            assert approval["passed"] is False and "rule big-h100" in approval["detail"] and "rita" in approval["detail"]
            in_chinese = cli(url, tokens["sam"], "check", str(_write(tmp_path, task("another-big", 8, 1.0))), "--lang", "zh")
            assert in_chinese.exit_code == 4 and "按当前内容无法运行" in in_chinese.stdout, in_chinese.output
            assert "需要审批（规则 big-h100），审批人：rita" in in_chinese.stdout.replace("\n", ""), in_chinese.stdout

            approved = cli(url, tokens["rita"], "approve", big.id, "--reason", "budget agreed with finance")
            assert approved.exit_code == 0, approved.output
            denied = cli(url, tokens["rita"], "deny", mine.id, "--reason", "not this month", "--lang", "zh")
            assert denied.exit_code == 0 and f"任务 {mine.id} 已由 user:rita 拒绝" in denied.output, denied.output

            await system.wait_for(lambda s: (v := s.task_by_name("big")) is not None and v.state.value == "succeeded",
                                  timeout=90, what="the approved task to run")
            await system.wait_for(lambda s: (v := s.task_by_name("mine")) is not None and v.state.value == "cancelled",
                                  what="the denied task to be cancelled")
            await system.wait_for(lambda s: _view_says_cancelled(http, mine.id, tokens["rita"]), what="the views")
            again = await http.post(f"/v1/tasks/{mine.id}/approve", json={"reason": "x"}, headers=bearer(tokens["rita"]))
            await system.wait_for(lambda s: _decisions_listed(http, tokens["sam"], 2), what="both decisions listed")
            listed = cli(url, tokens["sam"], "approvals", "--json")
            assert listed.exit_code == 0, listed.output
            in_table = cli(url, tokens["sam"], "approvals", "--lang", "zh")
            assert in_table.exit_code == 0 and "已拒绝" in in_table.output and "not this month" in in_table.output
            queue = cli(url, tokens["sam"], "queue", "--json")
            assert queue.exit_code == 0, queue.output

    (approved_event,) = [e for e in system.of_type("task.approved") if e.data.task_id == big.id]
    assert approved_event.actor == "user:rita" and approved_event.data.note == "budget agreed with finance"
    (denied_event,) = system.of_type("task.denied")
    assert denied_event.actor == "user:rita" and denied_event.data.task_id == mine.id
    assert again.status_code == 409 and "cancelled" in again.text  # a denied task no longer waits for approval
    granted = [e for e in system.of_type("lease.granted") if e.data.task_id == big.id]
    assert granted and all(e.occurred_at > approved_event.occurred_at for e in granted)
    assert isinstance(json_of(queue), list)
    decided = {(row["name"], row["decision"], row["reviewer"], row["reason"]) for row in json_of(listed)["decided"]}
    assert decided == {("big", "approve", "user:rita", "budget agreed with finance"),
                       ("mine", "deny", "user:rita", "not this month")}  # fmt: skip


async def _decisions_listed(http: httpx.AsyncClient, token: str, count: int) -> bool:
    """The decisions come from the audit archive, a moment after the dispatcher carried them out."""
    answer = await http.get("/v1/approvals/decisions", headers=bearer(token))
    return answer.status_code == 200 and len(answer.json()) >= count


async def _view_says_cancelled(http: httpx.AsyncClient, task_id: str, token: str) -> bool:
    answer = await http.get(f"/v1/tasks/{task_id}", headers=bearer(token))
    return answer.status_code == 200 and answer.json()["state"] == "cancelled"


def _write(directory: Path, submission: dict[str, Any]) -> Path:
    path = directory / f"{submission['name']}.json"
    path.write_text(json.dumps(submission))
    return path

"""The demo's board and its rendering: states, fleet usage, leased vs charged money, summary text."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

from rich.console import Console

from services.cli.lang import CliLang
from services.demo.board import Board
from services.demo.render import Header, live_view, plain_status, summary
from services.demo.supervisor import ChildStatus, Notice, NoticeKind
from shared.cards import load_catalog
from shared.events import Envelope, TaskState, make_event

T0 = datetime(2025, 6, 1, 12, tzinfo=UTC)
CATALOG = load_catalog()
_seq = count(1)


def event(event_type: str, subject: str, data: dict[str, Any], at: float = 0.0) -> Envelope:
    return make_event(event_type, subject=subject, subject_seq=next(_seq), producer="test/1", actor="test",
                      data=data, occurred_at=T0 + timedelta(seconds=at))  # fmt: skip


def submitted(task_id: str, key: str, project: str = "llm", gpus: int = 2) -> Envelope:
    submission = {"name": f"job-{task_id}", "project": project, "priority_class": "standard", "gpus": gpus,
                  "estimate_gpu_hours": 1, "profile": "compute", "idempotency_key": key}  # fmt: skip
    return event("task.submitted", f"task/{task_id}", {"task_id": task_id, "idempotency_key": key, "submission": submission})


def granted(task_id: str, lease_id: str, at: float, gpus: tuple[int, ...] = (0, 1)) -> Envelope:
    return event("lease.granted", f"lease/{lease_id}", {
        "lease_id": lease_id, "task_id": task_id, "agent_id": "a1", "node_id": "n1", "card_type": "H100",
        "gpu_indices": list(gpus), "fencing_token": 1, "ttl_s": 30, "expires_at": (T0 + timedelta(seconds=at + 30)).isoformat(),
    }, at)  # fmt: skip


def released(task_id: str, lease_id: str, start: float, end: float, gpus: int = 2) -> Envelope:
    return event("lease.released", f"lease/{lease_id}", {
        "lease_id": lease_id, "task_id": task_id, "node_id": "n1", "card_type": "H100", "gpus": gpus,
        "granted_at": (T0 + timedelta(seconds=start)).isoformat(), "ended_at": (T0 + timedelta(seconds=end)).isoformat(),
        "reason": "succeeded",
    }, end)  # fmt: skip


def succeeded(task_id: str, lease_id: str, at: float) -> Envelope:
    return event("task.succeeded", f"task/{task_id}", {"task_id": task_id, "lease_id": lease_id}, at)


def usage(task_id: str, lease_id: str, seconds: float, project: str = "llm") -> Envelope:
    price = CATALOG.card("H100").price_per_gpu_hour
    return event("usage.recorded", f"lease/{lease_id}", {
        "lease_id": lease_id, "task_id": task_id, "project": project, "card_type": "H100",
        "gpu_seconds": seconds, "cost": seconds * price / 3600,
    })  # fmt: skip


def node() -> Envelope:
    return event("node.registered", "node/n1", {"node_id": "n1", "agent_id": "a1", "card_type": "H100", "gpus": 8, "mode": "sim"})


def test_fleet_usage_follows_grants_and_releases() -> None:
    board = Board(CATALOG)
    board.apply_all([node(), submitted("T1", "k1"), granted("T1", "L1", 1)])
    assert board.fleet() == {"H100": (2, 8)}

    board.apply(released("T1", "L1", 1, 11))
    assert board.fleet() == {"H100": (0, 8)}


def test_leased_money_is_lease_time_times_gpus_times_price_and_usage_is_what_the_ledger_charged() -> None:
    board = Board(CATALOG)
    board.apply_all([submitted("T1", "k1"), granted("T1", "L1", 0), released("T1", "L1", 0, 90), usage("T1", "L1", 100.0)])

    assert board.leased["llm"].gpu_seconds == 180.0
    assert board.leased["llm"].cost == 180.0 * CATALOG.card("H100").price_per_gpu_hour / 3600
    assert board.charged["llm"].gpu_seconds == 100.0


def test_usage_the_ledger_booked_before_it_saw_the_task_counts_for_the_tasks_project() -> None:
    board = Board(CATALOG)
    board.apply_all([submitted("T1", "k1"), granted("T1", "L1", 0), usage("T1", "L1", 40.0, project="unknown"),
                     usage("T1", "L1", 60.0)])  # fmt: skip
    assert board.charged["llm"].gpu_seconds == 100.0 and "unknown" not in board.charged


def test_the_ledger_has_caught_up_only_when_every_project_is_charged_what_its_ended_leases_held() -> None:
    board = Board(CATALOG)
    assert not board.ledger_caught_up()  # nothing ended yet
    board.apply_all([submitted("T1", "k1"), submitted("T2", "k2", project="research"), granted("T1", "L1", 0),
                     granted("T2", "L2", 0), released("T1", "L1", 0, 500), released("T2", "L2", 0, 10),
                     usage("T1", "L1", 1000.0)])  # fmt: skip
    assert not board.ledger_caught_up()  # the totals differ by 2%, one project by all of its 20 GPU-seconds
    board.apply(usage("T2", "L2", 19.9, project="research"))
    assert not board.ledger_caught_up()
    board.apply(usage("T2", "L2", 0.1, project="research"))
    assert board.ledger_caught_up()


def test_a_release_carried_by_the_run_end_frees_the_gpus_and_counts_its_money_alike() -> None:
    release = released("T1", "L1", 0, 90).data.model_dump(mode="json", exclude={"lease_id", "task_id"})
    carrier = event("task.succeeded", "task/T1", {"task_id": "T1", "lease_id": "L1", "released": release}, 90)
    board = Board(CATALOG)
    board.apply_all([node(), submitted("T1", "k1"), granted("T1", "L1", 0), carrier])
    assert board.fleet() == {"H100": (0, 8)} and board.leased["llm"].gpu_seconds == 180.0


def test_settled_needs_every_key_known_and_finished() -> None:
    board = Board(CATALOG)
    board.apply_all([submitted("T1", "k1"), submitted("T2", "k2"), granted("T1", "L1", 1), succeeded("T1", "L1", 5)])
    assert not board.is_settled({"k1", "k2"})
    assert not board.is_settled({"k1", "k3"})  # k3 never arrived
    assert board.is_settled({"k1"})

    board.apply(event("task.unmatchable", "task/T2", {"task_id": "T2", "reason": "no_fleet", "detail": "no node yet"}))
    assert not board.is_settled({"k1", "k2"})  # passes by itself once a node registers

    board.apply(event("task.unmatchable", "task/T2", {"task_id": "T2", "reason": "insufficient_vram", "detail": "no card has 200 GB"}))
    assert board.tasks["T2"].state is TaskState.UNMATCHABLE
    assert board.is_settled({"k1", "k2"})


def test_a_task_held_for_a_person_is_settled_one_waiting_for_a_reviewer_is_not() -> None:
    board = Board(CATALOG)
    board.apply_all([submitted("T1", "k1"), event("task.queued", "task/T1", {"task_id": "T1", "project": "llm", "priority_class": "core", "priority": 0}),
                     event("task.held", "task/T1", {"task_id": "T1", "reason": "not_approved", "detail": "waits for approval"})])
    assert board.tasks["T1"].state is TaskState.HELD and not board.is_settled({"k1"})  # the demo's reviewer decides

    board.apply(event("task.held", "task/T1", {"task_id": "T1", "reason": "repeatedly_idle", "detail": "reclaimed 2 times"}))
    assert board.is_settled({"k1"})


NOTICES = [Notice(time.time(), "matcher", NoticeKind.EXITED_RESTARTING, {"code": 1, "uptime_s": 2.5, "restart_in_s": 3.0}),
           Notice(time.time(), "intake", NoticeKind.STOPPED, {"code": 0})]


def test_the_live_view_and_summary_say_what_happened() -> None:
    board = Board(CATALOG)
    board.apply_all([node(), submitted("T1", "k1"), submitted("T2", "k2", project="vision"), granted("T1", "L1", 1),
                     succeeded("T1", "L1", 5), released("T1", "L1", 1, 5), usage("T1", "L1", 8.0)])  # fmt: skip
    header = Header("r1", 600, "http://127.0.0.1:8080", time.monotonic(), "/tmp/logs", notes=("t=8s uploaded s3://b/k",))
    children = [ChildStatus("intake", 1, True, 0, None, None), ChildStatus("matcher", None, False, 2, 3.0, 1)]
    console = Console(width=160, record=True)

    console.print(live_view(board, header, children, NOTICES))
    console.print(summary(board, frozenset({"k1", "k2"})))
    text = console.export_text()

    assert "job-T1" in text and "succeeded" in text
    assert "2/8 GPUs" not in text and "0/8 GPUs leased" in text
    assert "1/2 up" in text and "matcher exited (1), restart in 3s" in text
    assert "uploaded s3://b/k" in text
    assert "matcher: exited with code 1 after 2.5s; restarting in 3s" in text and "intake: stopped (exit code 0)" in text
    assert "vision" in text and "total" in text
    assert "job-T2" in text  # did not run: listed with its reason


def test_the_plain_status_line_counts_tasks_and_leased_gpus() -> None:
    board = Board(CATALOG)
    assert plain_status(board).endswith("no node registered yet")

    board.apply_all([node(), submitted("T1", "k1"), granted("T1", "L1", at=1.0)])
    line = plain_status(board)

    assert "leased 1" in line and "total 1" in line
    assert "2/8 GPUs leased" in line
    assert "\x1b" not in line  # plain text: nothing for a terminal to interpret


def test_the_live_view_and_summary_speak_chinese_when_asked() -> None:
    board = Board(CATALOG)
    board.apply_all([node(), submitted("T1", "k1"), submitted("T2", "k2", project="vision"), granted("T1", "L1", 1),
                     succeeded("T1", "L1", 5), released("T1", "L1", 1, 5), usage("T1", "L1", 8.0),
                     event("task.held", "task/T2", {"task_id": "T2", "reason": "not_approved", "detail": "waits for approval"})])  # fmt: skip
    header = Header("r1", 600, "http://127.0.0.1:8080", time.monotonic(), "/tmp/logs", notes=("t=8s 已上传 s3://b/k",))
    children = [ChildStatus("intake", 1, True, 0, None, None), ChildStatus("matcher", None, False, 2, 3.0, 1)]
    console = Console(width=160, record=True)

    console.print(live_view(board, header, children, NOTICES, lang=CliLang.ZH))
    console.print(summary(board, frozenset({"k1", "k2"}), time_scale=600, lang=CliLang.ZH))
    text = console.export_text()

    assert "cardflow 演示" in text and "最近的任务" in text and "已完成" in text
    assert "已租出 0/8 块 GPU" in text and "1/2 运行中" in text and "matcher 已退出（1），3 秒后重启" in text
    assert "等待审批 (not_approved)（原文：waits for approval）" in text  # the reason's name, the detail as written
    assert "演示汇总" in text and "合计" in text and "模拟时间 x600" in text
    assert "matcher: 运行 2.5 秒后退出，退出码 1；3 秒后重启" in text and "intake: 已停止（退出码 0）" in text
    for english in ("recent tasks", "GPUs leased", "demo summary", "leased GPU-h", "restart in", "exit code", "restarting"):  # reason names keep their value
        assert english not in text, english
    assert plain_status(board, CliLang.ZH).startswith("任务：")

"""Operators' verbs live: `cardflow hold|release|requeue|priority|drain|undrain` as real CLI processes
against a served console and the whole running system with a simulated agent. Each verb is checked
in the event log (the dispatcher's answer, with the operator as actor and their reason) and in
what it does (a held task leaves the queue, a drained node gets no lease, a requeued task resumes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import httpx

from services.identity.bootstrap import bootstrap_admin
from shared.events import Envelope, TaskState
from tests.helpers.console_server import serving_console
from tests.helpers.system import RunningSystem

CLI_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


async def cardflow(url: str, token: str, *args: str) -> Ran:
    """A real `cardflow` process (its own interpreter, like a person's shell) talking to the API."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env |= {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": token, "COLUMNS": "200"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT_S)
    return Ran(process.returncode or 0, out.decode(), err.decode())


def token_for(url: str, admin: str, name: str, role: str) -> str:
    answer = httpx.post(f"{url}/v1/tokens", json={"name": name, "role": role},
                        headers={"authorization": f"Bearer {admin}"}, timeout=30)  # fmt: skip
    answer.raise_for_status()
    return answer.json()["secret"]


def events_of(system: RunningSystem, type_: str, task_or_node: str) -> list[Envelope]:
    return [e for e in system.of_type(type_)
            if getattr(e.data, "task_id", None) == task_or_node or getattr(e.data, "node_id", None) == task_or_node]


def a_task(name: str, hours: float) -> dict[str, Any]:
    return {"name": name, "project": "ops", "priority_class": "standard", "gpus": 2, "min_vram_gb": 80,
            "estimate_gpu_hours": hours, "profile": "compute", "checkpoint": {"interval_minutes": 1}}  # fmt: skip


async def test_each_operator_verb_is_carried_out_with_its_actor_and_reason(system: RunningSystem) -> None:
    system.start_agent("h100-a", "H100x2", time_scale=60)  # the long task runs for hours of wall time
    await system.submit([a_task("long-run", 200.0), a_task("waiting", 1.0) | {"idempotency_key": "nightly-eval-42"}])
    await system.wait_for(lambda s: (v := s.task_by_name("long-run")) is not None and v.state is TaskState.RUNNING
                          and (w := s.task_by_name("waiting")) is not None and w.state is TaskState.QUEUED,
                          timeout=120, what="long-run running, waiting queued behind it")  # fmt: skip
    long_id, waiting_id = system.task_by_name("long-run").id, system.task_by_name("waiting").id  # type: ignore[union-attr]
    admin = (await bootstrap_admin(system.settings.database_dsn or "", "root")).secret

    async with contextlib.AsyncExitStack() as stack:
        url = await asyncio.to_thread(stack.enter_context, serving_console(system.settings))
        planner = await asyncio.to_thread(token_for, url, admin, "planner", "operator")
        sam = await asyncio.to_thread(token_for, url, admin, "sam", "submitter")

        # hold, by name: the task leaves the queue with the operator's sentence
        held = await cardflow(url, planner, "hold", "waiting", "--reason", "cluster maintenance")
        assert held.code == 0, held.err
        assert f"hold of task {waiting_id} (waiting) requested by user:planner" in held.out
        operator_holds = lambda s: [e for e in events_of(s, "task.held", waiting_id) if e.data.reason == "operator"]  # noqa: E731
        await system.wait_for(operator_holds, what="task.held (operator) for waiting")
        [hold_event] = operator_holds(system)
        assert (hold_event.actor, hold_event.data.reason) == ("user:planner", "operator")
        assert hold_event.data.detail == "held by user:planner: cluster maintenance"

        async def views_show_it_held() -> bool:  # the API checks a request against the views, which follow a moment later
            return await system.pool.fetchval("SELECT view->>'reason' FROM views.tasks WHERE id = $1", waiting_id) == "operator"

        await system.wait_for(lambda s: views_show_it_held(), what="the views showing the operator's hold")
        again = await cardflow(url, planner, "hold", waiting_id, "--reason", "twice")
        assert again.code == 1 and "already held by an operator" in again.err
        refused = await cardflow(url, sam, "hold", waiting_id, "--reason", "not mine to hold")
        assert refused.code == 3 and "operator" in refused.err

        # priority, by idempotency key
        changed = await cardflow(url, planner, "priority", "nightly-eval-42", "7", "--reason", "deadline moved")
        assert changed.code == 0, changed.err
        await system.wait_for(lambda s: events_of(s, "task.priority_changed", waiting_id), what="task.priority_changed")
        [priority_event] = events_of(system, "task.priority_changed", waiting_id)
        assert (priority_event.actor, priority_event.data.priority, priority_event.data.previous) == ("user:planner", 7, 0)

        # drain: the node finishes what runs there and takes nothing new
        drained = await cardflow(url, planner, "drain", "h100-a", "--reason", "swap a fan")
        assert drained.code == 0, drained.err
        await system.wait_for(lambda s: events_of(s, "node.drained", "h100-a"), what="node.drained")
        [drain_event] = events_of(system, "node.drained", "h100-a")
        assert drain_event.actor == "user:planner" and drain_event.data.reason == "swap a fan"
        assert len(drain_event.data.running_leases) == 1

        async def node_state() -> str:
            listed = await cardflow(url, sam, "nodes", "--json")
            assert listed.code == 0, listed.err
            return next(row["state"] for row in json.loads(listed.out) if row["node_id"] == "h100-a")

        assert await _eventually(node_state, "draining")

        # requeue: the run stops (revoked by the operator), the task is queued again; the drained
        # node gets no new lease: the dispatcher says the task waits for capacity
        requeued = await cardflow(url, planner, "requeue", "long-run", "--reason", "move it off h100-a")
        assert requeued.code == 0, requeued.err
        await system.wait_for(lambda s: events_of(s, "task.requeued", long_id), timeout=120, what="task.requeued")
        [revoked] = events_of(system, "lease.revoked", long_id)
        assert (revoked.actor, revoked.data.reason) == ("user:planner", "operator")
        assert revoked.data.detail == "requeued by user:planner: move it off h100-a"
        [requeue_event] = events_of(system, "task.requeued", long_id)
        assert requeue_event.data.reason == "operator_requeue"
        await system.wait_for(lambda s: any(e.data.reason == "no_capacity" for e in events_of(s, "task.held", long_id)),
                              timeout=120, what="the dispatcher to say long-run waits for capacity (node drained)")  # fmt: skip
        assert len(events_of(system, "lease.granted", long_id)) == 1  # only the first grant
        assert await _eventually(node_state, "drained")
        refused_requeue = await cardflow(url, planner, "requeue", waiting_id, "--reason", "it is not running")
        assert refused_requeue.code == 1 and "nothing to requeue" in refused_requeue.err

        # undrain: the node takes leases again; long-run resumes from its checkpoint
        undrained = await cardflow(url, planner, "undrain", "h100-a", "--reason", "fan replaced")
        assert undrained.code == 0, undrained.err
        await system.wait_for(lambda s: len(events_of(s, "lease.granted", long_id)) == 2, timeout=120,
                              what="long-run leased again after the undrain")  # fmt: skip
        [undrain_event] = events_of(system, "node.undrained", "h100-a")
        assert undrain_event.actor == "user:planner"
        second_grant = events_of(system, "lease.granted", long_id)[1]
        assert requeue_event.data.resume_from is not None  # it checkpointed every simulated minute
        assert second_grant.data.resume_from == requeue_event.data.resume_from

        # release: the held task is back in the queue
        released = await cardflow(url, planner, "release", "waiting", "--reason", "maintenance over", "--lang", "zh")
        assert released.code == 0, released.err
        assert "已请求放行任务" in released.out
        await system.wait_for(lambda s: events_of(s, "task.released", waiting_id), what="task.released")
        [release_event] = events_of(system, "task.released", waiting_id)
        assert (release_event.actor, release_event.data.reason) == ("user:planner", "maintenance over")
        await system.wait_for(lambda s: s.views[waiting_id].state is not TaskState.HELD, what="waiting no longer held")

        unknown = await cardflow(url, planner, "hold", "no-such-task", "--reason", "typo")
        assert unknown.code == 1 and "no task has the id, idempotency key or name 'no-such-task'" in unknown.err


async def _eventually(read: Any, expected: str, attempts: int = 60) -> bool:
    """Poll `read()` until it returns `expected` (the views follow the event log within moments)."""
    for _ in range(attempts):
        if await read() == expected:
            return True
        await asyncio.sleep(1.0)
    return False

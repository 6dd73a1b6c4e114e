"""`cardflow hold|release|requeue|priority TASK` and `cardflow drain|undrain NODE`: operators' verbs.

API clients of `POST /v1/tasks/{id}/hold|release|requeue|priority` and `POST /v1/nodes/{id}/drain|undrain`
(role operator; `--reason` required, recorded with the caller as actor). The API answers at once
when a verb would change nothing (409: the task is not held, not running, ...); otherwise the
dispatcher carries the request out within a cycle and `cardflow status TASK` / `cardflow nodes`
show it. TASK is an id, an idempotency key or a name only one task has.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from services.cli.lang import CliLang, LangOption
from services.cli.task_refs import TaskArgument

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded with the request (required)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print the API's answer as JSON")]
NodeArgument = Annotated[str, typer.Argument(metavar="NODE", help="a node id (`cardflow nodes` lists them)")]

DONE: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "hold": "hold of task {task} requested by {actor}: it leaves the queue until released",
        "release": "release of task {task} requested by {actor}: it goes back into the queue",
        "requeue": "requeue of task {task} requested by {actor}: its run stops and it waits again from its last checkpoint",
        "priority": "priority of task {task} set to {priority} by {actor}: the queue is ordered by it from the next cycle",
        "drain": "drain of node {node} requested by {actor}: no new leases there; running ones finish",
        "undrain": "undrain of node {node} requested by {actor}: it takes new leases again",
        "after": "(the dispatcher carries it out within a cycle; `cardflow {show}` shows it)",
    },
    CliLang.ZH: {
        "hold": "{actor} 已请求暂缓任务 {task}：它将移出队列，直到被放行",
        "release": "{actor} 已请求放行任务 {task}：它将回到队列",
        "requeue": "{actor} 已请求将任务 {task} 重新排队：本次运行将停止，并从最近的检查点重新等待",
        "priority": "{actor} 已将任务 {task} 的优先级设为 {priority}：下一个调度周期起按此排序",
        "drain": "{actor} 已请求排空节点 {node}：不再分配新租约，正在运行的任务继续完成",
        "undrain": "{actor} 已请求恢复节点 {node}：它将重新接受新租约",
        "after": "（调度器会在一个周期内执行；用 `cardflow {show}` 查看）",
    },
}


def register(app: typer.Typer) -> None:
    for command in (hold, release, requeue, priority, drain, undrain):
        app.command(command.__name__, rich_help_panel="Operator")(command)


def hold(task: TaskArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Hold a waiting task: it leaves the queue until `cardflow release` (operator)."""
    _task_verb("hold", task, {"reason": reason}, as_json, lang)


def release(task: TaskArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Release a task an operator held: it goes back into the queue (operator)."""
    _task_verb("release", task, {"reason": reason}, as_json, lang)


def requeue(task: TaskArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Requeue a leased or running task: its run stops and it waits again, resuming from its checkpoint (operator)."""
    _task_verb("requeue", task, {"reason": reason}, as_json, lang)


def priority(
    task: TaskArgument,
    value: Annotated[int, typer.Argument(metavar="N", min=-10_000, max=10_000, help="the new priority within its class; higher first")],
    reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Change a task's priority within its class (operator)."""
    _task_verb("priority", task, {"priority": value, "reason": reason}, as_json, lang)


def drain(node: NodeArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Drain a node: no new leases there; the ones running finish (operator)."""
    _node_verb("drain", node, reason, as_json, lang)


def undrain(node: NodeArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Undrain a node: it takes new leases again (operator)."""
    _node_verb("undrain", node, reason, as_json, lang)


def _task_verb(verb: str, ref: str, body: dict[str, Any], as_json: bool, lang: CliLang) -> None:
    from services.cli.client import cli_api
    from services.cli.task_refs import task_id_of

    with cli_api(lang) as api:
        task_id = task_id_of(api, ref)
        answer = api.post(f"/v1/tasks/{task_id}/{verb}", body)
    _print(answer, verb, as_json, lang, task=task_id if ref == task_id else f"{task_id} ({ref})",
           show=f"status {task_id}")


def _node_verb(verb: str, node_id: str, reason: str, as_json: bool, lang: CliLang) -> None:
    from services.cli.client import cli_api

    with cli_api(lang) as api:
        answer = api.post(f"/v1/nodes/{node_id}/{verb}", {"reason": reason})
    _print(answer, verb, as_json, lang, node=node_id, show="nodes")


def _print(answer: dict[str, Any], verb: str, as_json: bool, lang: CliLang, **names: str) -> None:
    if as_json:
        print(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    words = DONE[lang]
    fields = {"actor": answer["requested_by"], "priority": answer.get("priority"), **names}
    print(f"{words[verb].format(**fields)} {words['after'].format(**fields)}")

"""A TASK argument as a person gives it: an id, an idempotency key or a name only one task has.

    with cli_api() as api:
        task_id = task_id_of(api, ref)      # GET /v1/lookup/task; 404 / 409 end the command with the API's sentence

`TaskArgument` is the argument every command that takes a TASK declares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from services.cli.client import ApiClient

TaskArgument = Annotated[str, typer.Argument(metavar="TASK", help="a task id, its idempotency key, or its name if only one task has it")]


def task_id_of(api: ApiClient, ref: str) -> str:
    """The id of the task `ref` names (`services.operator.task_refs` decides on the server)."""
    return api.get("/v1/lookup/task", ref=ref)["task_id"]


def task_id_or_ref(api: ApiClient, ref: str) -> str:
    """`task_id_of`, or `ref` itself when no live task has it (e.g. a task only the audit archive
    still knows); the command's own request then says whether it exists."""
    found = api.call("GET", "/v1/lookup/task", params={"ref": ref}, expect=(404,))
    return found.json()["task_id"] if found.status_code == 200 else ref

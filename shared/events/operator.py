"""Events of operators' verbs on tasks and nodes: the requests, and what the dispatcher made of them.

An operator's verb (`cardflow hold|release|requeue|priority|drain|undrain`, the console's forms)
is a REQUEST the console's API appends through intake's outbox, like a cancellation, with the
operator's token as actor and the reason they gave. The dispatcher owns tasks' and nodes' state:
it carries a request out and says so with its own events, caused by the request (so they carry the
same actor):

| request                          | the dispatcher's answer                                       |
|----------------------------------|---------------------------------------------------------------|
| `task.hold_requested`            | `task.held` (reason `operator`): out of the queue until released |
| `task.release_requested`         | `task.released`: back in the queue                             |
| `task.requeue_requested`         | `lease.revoked` (operator), then `task.requeued` (operator)    |
| `task.priority_change_requested` | `task.priority_changed`                                        |
| `node.drain_requested`           | `node.drained`: no new leases there; running ones finish       |
| `node.undrain_requested`         | `node.undrained`                                               |

A request that no longer applies when the dispatcher reads it (the task finished meanwhile, the
node is already drained) changes nothing; the request itself stays in the event log.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from shared.events.envelope import Envelope, Payload
from shared.events.values import Detail, EntityId

OperatorReason = Annotated[str, Field(min_length=1, max_length=2000, description="why, in the operator's words")]
TaskPriority = Annotated[int, Field(ge=-10_000, le=10_000, description="order within the class; higher first")]


# ---- requests (the console's API, through intake's outbox) -------------------------------------


class TaskOperatorRequestData(Payload):
    task_id: EntityId
    reason: OperatorReason


class TaskHoldRequested(Envelope):
    """An operator (the actor) asked to keep a waiting task out of the queue until released."""

    type: Literal["task.hold_requested"] = "task.hold_requested"
    data: TaskOperatorRequestData


class TaskReleaseRequested(Envelope):
    """An operator asked to put a task they held back into the queue."""

    type: Literal["task.release_requested"] = "task.release_requested"
    data: TaskOperatorRequestData


class TaskRequeueRequested(Envelope):
    """An operator asked to stop a leased or running task and queue it again (it resumes from its
    last checkpoint)."""

    type: Literal["task.requeue_requested"] = "task.requeue_requested"
    data: TaskOperatorRequestData


class TaskPriorityChangeRequestedData(Payload):
    task_id: EntityId
    priority: TaskPriority
    reason: OperatorReason


class TaskPriorityChangeRequested(Envelope):
    """An operator asked to change a task's priority within its class."""

    type: Literal["task.priority_change_requested"] = "task.priority_change_requested"
    data: TaskPriorityChangeRequestedData


class NodeOperatorRequestData(Payload):
    node_id: EntityId
    reason: OperatorReason


class NodeDrainRequested(Envelope):
    """An operator asked that a node get no new leases (the ones running there finish)."""

    type: Literal["node.drain_requested"] = "node.drain_requested"
    data: NodeOperatorRequestData


class NodeUndrainRequested(Envelope):
    """An operator asked that a drained node take new leases again."""

    type: Literal["node.undrain_requested"] = "node.undrain_requested"
    data: NodeOperatorRequestData


# ---- the dispatcher's answers ------------------------------------------------------------------


class TaskReleasedData(Payload):
    task_id: EntityId
    reason: Detail = Field(description="the operator's reason for the release")


class TaskReleased(Envelope):
    """A task an operator held is back in the queue (the actor is the operator who released it)."""

    type: Literal["task.released"] = "task.released"
    data: TaskReleasedData


class TaskPriorityChangedData(Payload):
    task_id: EntityId
    priority: TaskPriority
    previous: int | None = Field(None, description="the priority before the change (None: not known yet)")
    reason: Detail = Field(description="the operator's reason")


class TaskPriorityChanged(Envelope):
    """A task's priority within its class changed; the next cycle orders the queue by it."""

    type: Literal["task.priority_changed"] = "task.priority_changed"
    data: TaskPriorityChangedData


class NodeDrainedData(Payload):
    node_id: EntityId
    reason: Detail = Field(description="the operator's reason")
    running_leases: tuple[EntityId, ...] = Field((), description="leases in force on the node, left to finish")


class NodeDrained(Envelope):
    """A node gets no new leases until undrained; leases running there finish."""

    type: Literal["node.drained"] = "node.drained"
    data: NodeDrainedData


class NodeUndrainedData(Payload):
    node_id: EntityId
    reason: Detail = Field(description="the operator's reason")


class NodeUndrained(Envelope):
    """A drained node takes new leases again."""

    type: Literal["node.undrained"] = "node.undrained"
    data: NodeUndrainedData


TASK_REQUESTS: tuple[type[Envelope], ...] = (
    TaskHoldRequested, TaskReleaseRequested, TaskRequeueRequested, TaskPriorityChangeRequested,
)
NODE_REQUESTS: tuple[type[Envelope], ...] = (NodeDrainRequested, NodeUndrainRequested)
OPERATOR_REQUESTS: tuple[type[Envelope], ...] = TASK_REQUESTS + NODE_REQUESTS
"""Every operator request type (the dispatcher consumes them)."""

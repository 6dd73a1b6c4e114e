"""Subject strings: which entity an event is about (`task/T123`, `lease/L9`, `quota/acct-1`).

`subject_seq` counts events per subject, so every producer must spell a subject the same way;
build them here.
"""

from __future__ import annotations


def task_subject(task_id: str) -> str:
    return f"task/{task_id}"


def lease_subject(lease_id: str) -> str:
    return f"lease/{lease_id}"


def node_subject(node_id: str) -> str:
    return f"node/{node_id}"


def quota_subject(account_id: str) -> str:
    return f"quota/{account_id}"


def usage_subject(project: str) -> str:
    """`usage/<project>`: the ledger's `usage.batch_recorded` events of one project."""
    return f"usage/{project}"


def round_subject(round_id: str) -> str:
    return f"round/{round_id}"


def agent_subject(agent_id: str) -> str:
    """Subject of an agent's reports and of the commands sent to it."""
    return f"agent/{agent_id}"


def data_subject(input_ref: object) -> str:
    """`data/s3://bucket/key` or `data/dataset@version` (for `data.ready_signalled`)."""
    return f"data/{input_ref}"


def config_subject(name: str) -> str:
    """`config/policy` or `config/cards`; templates use `template_subject`."""
    return f"config/{name}"


def template_subject(name: str) -> str:
    """`template/<name>` (the template's own name, without `templates/`)."""
    return f"template/{name}"


def token_subject(token_id: str) -> str:
    return f"token/{token_id}"


def deadletter_subject(deadletter_id: str) -> str:
    """`deadletter/<id>`: one entry of cf:deadletter."""
    return f"deadletter/{deadletter_id}"


def split_subject(subject: str) -> tuple[str, str]:
    """`"task/T1"` -> `("task", "T1")`; ValueError if there is no kind prefix."""
    kind, sep, entity_id = subject.partition("/")
    if not sep or not kind or not entity_id:
        raise ValueError(f"subject {subject!r} is not 'kind/id'")
    return kind, entity_id

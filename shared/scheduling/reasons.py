"""The human sentences behind each deferral reason (the console and `audit why` print them verbatim).

One place for the wording keeps the sentences consistent: each says what the task needs, what the
fleet had, and why that was not enough — in the style of Kueue's "insufficient unused quota for gpu
in flavor a100, 2 more needed".
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.scheduling.model import Deferral, DeferralReason


def format_duration(seconds: float) -> str:
    """A short human duration: '45s', '12m', '3h05m', '2d04h'."""
    if not seconds >= 60:  # under a minute; a negative duration or not a number is said as 0s
        return f"{seconds if seconds > 0.0 else 0.0:.0f}s"
    minutes = int(seconds // 60)
    text = _MINUTES_SAID.get(minutes)
    if text is None:
        text = _minutes_text(minutes)
        if minutes < _MINUTES_KEPT:
            _MINUTES_SAID[minutes] = text
    return text


# `format_duration` of a whole number of minutes, remembered (a cycle says many task runtimes): a dict read costs
# less than a call of an `lru_cache` (its arguments made into a tuple); up to ~69 days, at most one entry a minute
_MINUTES_SAID: dict[int, str] = {}
_MINUTES_KEPT = 100_000


def _minutes_text(minutes: int) -> str:
    """`format_duration` of a whole number of minutes."""
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def gpus_text(gpus: int) -> str:
    return f"{gpus} GPU" if gpus == 1 else f"{gpus} GPUs"


def card_list(card_types: Sequence[str]) -> str:
    return " or ".join(card_types) if card_types else "no card type"


def defer(task_id: str, reason: DeferralReason, detail: str) -> Deferral:
    return Deferral(task_id=task_id, reason=reason, detail=detail)


# -- eligibility -------------------------------------------------------------------------------

DATA_NOT_READY_TEXT = "its input data is not ready yet"
UNMATCHED_TEXT = "no adequate card type has been matched to it yet"
NOT_APPROVED_TEXT = "it waits for approval"


def quota_account_name(project: str, card_type: str | None, accounts: int, account_id: str) -> str:
    """How a sentence names an account: 'project p' for a project's only account of every card type;
    otherwise the account and what it covers ('account a1 of project p (H100 only)')."""
    if accounts == 1 and card_type is None:
        return f"project {project}"
    only = f" ({card_type} only)" if card_type else ""
    return f"account {account_id} of project {project}{only}"


def quota_not_yet_valid(account: str, starts_in_s: float) -> str:
    return f"the quota of {account} becomes valid in {format_duration(starts_in_s)}"


def quota_expires(account: str, card_type: str, runtime_s: float, left_s: float, margin_s: float) -> str:
    if left_s <= 0:
        return f"the quota of {account} has expired"
    return (
        f"runs about {format_duration(runtime_s)} on {card_type}, but the quota of {account} "
        f"expires in {format_duration(left_s)} (a task must end {format_duration(margin_s)} before that)"
    )


def quota_exhausted(account: str, card_type: str, need_gpu_hours: float, left_gpu_hours: float) -> str:
    return quota_need(card_type, need_gpu_hours) + quota_left(account, left_gpu_hours)


def quota_need(card_type: str, need_gpu_hours: float) -> str:
    """The task's half of `quota_exhausted`."""
    return f"needs {need_gpu_hours:.1f} GPU-hours on {card_type}"


def quota_exhausted_around(card_type: str, account_half: str) -> tuple[str, str]:
    """`quota_need(card_type, need) + account_half` split around the need, as (before, after): a refusal kept for
    many tasks says `f"{before}{need:.1f}{after}"`, one number formatted per task."""
    return "needs ", f" GPU-hours on {card_type}{account_half}"


def quota_left(account: str, left_gpu_hours: float) -> str:
    """The account's half of `quota_exhausted` (the same for every task until the account is charged)."""
    return f"; {account} has {max(0.0, left_gpu_hours):.1f} GPU-hours of quota left"


# -- capacity ----------------------------------------------------------------------------------


def no_capacity(gpus: int, card_types: Sequence[str], largest_free: Sequence[tuple[str, int]]) -> str:
    free = ", ".join(f"{card} {count}" for card, count in largest_free) or "none"
    return f"needs {gpus_text(gpus)} of {card_list(card_types)} on one node; largest free block: {free}"


def no_capacity_span(gpus: int, card_types: Sequence[str], free: Sequence[tuple[str, int]]) -> str:
    total = ", ".join(f"{card} {count}" for card, count in free) or "none"
    return f"needs {gpus_text(gpus)} of {card_list(card_types)} across nodes; free: {total}"


def not_in_fleet(card_types: Sequence[str]) -> str:
    return f"none of its card types ({card_list(card_types)}) is in the fleet"


def never_fits(gpus: int, limits: Sequence[tuple[str, int]]) -> str:
    usable = ", ".join(f"{card} {limit}" for card, limit in limits)
    return f"can never start: needs {gpus_text(gpus)}, but at most {usable} can ever be used by it"


NO_FREE_GPUS_TEXT = "no GPU of any card type is free this cycle"


def headroom(gpus: int, card_type: str, usable: int, kept: int) -> str:
    return (
        f"needs {gpus_text(gpus)} of {card_type}; {max(0, usable)} free after headroom "
        f"({gpus_text(kept)} kept for core work)"
    )


def heavy_spread(gpus: int, card_type: str, max_heavy: int) -> str:
    return (
        f"needs {gpus_text(gpus)} of {card_type} on a node running fewer than {max_heavy} "
        f"memory/bandwidth-heavy tasks; every node with room already has {max_heavy}"
    )


# -- reservation, baselines, preemption ----------------------------------------------------------


def reserved(gpus: int, card_type: str, start_in_s: float, node_ids: Sequence[str],
             fillers_yield: bool = False) -> str:
    nodes = ", ".join(node_ids[:3]) + (f" (+{len(node_ids) - 3} more)" if len(node_ids) > 3 else "")
    when = ("when its preemption grace ends and opportunistic work yields the GPUs" if fillers_yield
            else "when running tasks are expected to end")
    return (
        f"holds the reservation: {gpus_text(gpus)} of {card_type} on {nodes} in about "
        f"{format_duration(start_in_s)}, {when}"
    )


def behind_reservation(holder: str, card_type: str, start_in_s: float, runtime_s: float) -> str:
    return behind_reservation_start(holder, card_type, start_in_s) + format_duration(runtime_s)


def behind_reservation_start(holder: str, card_type: str, start_in_s: float) -> str:
    """`behind_reservation` up to the task's own runtime: the same for every task behind the reservation."""
    return f"would delay task {holder}, which holds the reservation on {card_type} in {format_duration(start_in_s)}; this task runs about "


def behind_blocked_head(holder: str, policy_name: str) -> str:
    return f"waits behind task {holder}, which cannot start (policy {policy_name} keeps strict order)"


def head_of_line(holder: str) -> str:
    return f"waits behind task {holder}, which cannot start yet (strict order, no backfill)"


def awaiting_preemption(victims: int, gpus: int, card_type: str, node_ids: Sequence[str]) -> str:
    leases = "1 opportunistic lease" if victims == 1 else f"{victims} opportunistic leases"
    return (
        f"preempting {leases} to free {gpus_text(gpus)} of {card_type} on {', '.join(node_ids)}; "
        "starts when they have checkpointed and released the GPUs"
    )


def consolidating(victims: int, gpus: int, card_type: str, node_ids: Sequence[str]) -> str:
    leases = "1 lease" if victims == 1 else f"{victims} leases"
    return (
        f"moving {leases} that checkpoint to other nodes' free GPUs to free {gpus_text(gpus)} of {card_type} on "
        f"{', '.join(node_ids)}; starts when they have checkpointed and released the GPUs"
    )


def preemption_grace(detail: str, grace_left_s: float) -> str:
    return f"{detail}; if still waiting in {format_duration(grace_left_s)}, it may preempt opportunistic work"

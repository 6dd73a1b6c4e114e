-- Governance (issue 12).
--
-- Quota accounts per card type, each with its own window: every account keeps the
-- GPU-seconds it counted (`shared.scheduling.quota_balance`), starting from the ledger's count in
-- quota.granted / quota.adjusted; a project-wide usage total can no longer say what an account of
-- one card type or one window used, so it goes.
ALTER TABLE quota_accounts ADD COLUMN used_gpu_seconds double precision NOT NULL DEFAULT 0;
ALTER TABLE quota_accounts ADD COLUMN alert_lead_days double precision NOT NULL DEFAULT 15;
DROP TABLE project_usage;

-- Approvals: who submitted a task (a reviewer may not approve their own), who approved it.
ALTER TABLE tasks ADD COLUMN submitted_by text;
ALTER TABLE tasks ADD COLUMN approved_by text;

-- Idle reclaim: utilisation and idle GPU-seconds since the last lease.renewed, the current idle
-- run of each lease; how often a task's leases were taken back for idleness.
ALTER TABLE leases ADD COLUMN util_pct_sum double precision NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN util_readings integer NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN idle_gpu_seconds double precision NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN idle_since timestamptz;
ALTER TABLE tasks ADD COLUMN reclaims integer NOT NULL DEFAULT 0;

-- The submission's labels, passed to agents with a grant (a simulated agent reports `sim_util_pct`).
ALTER TABLE tasks ADD COLUMN labels jsonb;

-- Deadlines and watches: a task's finish-by time; the alerts raised about it and what its start
-- owes to (reservation, preemption), as words (`shared.leasing.watch`, `shared.leasing.queue_order`).
ALTER TABLE tasks ADD COLUMN deadline timestamptz;
ALTER TABLE tasks ADD COLUMN flags text[] NOT NULL DEFAULT '{}';

-- The queue as people see it, rewritten every few seconds by the leader: each waiting task's
-- position in plan()'s order and its estimated start and end (`shared.scheduling.estimate`).
CREATE TABLE queue_estimates (
    task_id         text PRIMARY KEY,
    position        integer NOT NULL,
    estimated_start timestamptz,           -- NULL: not estimated (it waits for something else: why_not)
    estimated_end   timestamptz,
    card_type       text,
    why_not         text NOT NULL DEFAULT '',
    deadline_at_risk boolean NOT NULL DEFAULT false,
    estimated_at    timestamptz NOT NULL
);

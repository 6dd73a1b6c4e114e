-- The dispatcher's tables (schema `dispatcher`): tasks and their facets, the fleet, leases with
-- fencing tokens, quotas, the leader epoch, and rejected agent reports.

-- One row per task the dispatcher heard of. Facets are written by the event that owns them, in
-- whatever order they arrive; the dispatcher's own columns follow them.
CREATE TABLE tasks (
    task_id               text PRIMARY KEY,
    -- task.submitted (intake)
    submitted             boolean NOT NULL DEFAULT false,
    project               text,
    priority_class        text,
    priority              integer,
    gpus                  integer,
    heavy                 boolean,
    checkpoint_interval_s double precision,
    estimate_gpu_hours    double precision,
    submitted_at          timestamptz,
    command               jsonb,            -- argv list or shell string
    env                   jsonb,
    image                 text,
    output_unit           text,
    -- task.readiness_changed (readiness); NULL = not known yet
    data_ready            boolean,
    readiness_seq         bigint,           -- subject_seq of the last readiness event applied
    -- task.matched / task.unmatchable (matcher); NULL = not known yet
    matched               boolean,
    options               jsonb,            -- [[card_type, runtime_s, cost], ...] in matcher order
    match_seq             bigint,
    -- task.cancel_requested (intake)
    cancel_requested      boolean NOT NULL DEFAULT false,
    cancel_reason         text NOT NULL DEFAULT '',
    -- the dispatcher's own state
    complete              boolean GENERATED ALWAYS AS (submitted AND data_ready IS NOT NULL AND matched IS NOT NULL) STORED,
    state                 text NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'held', 'leased', 'running', 'succeeded', 'failed', 'cancelled')),
    run                   integer NOT NULL DEFAULT 0,   -- incremented per grant; leases of older runs no longer steer the task
    resume_from           text,                         -- last accepted checkpoint
    queued_announced      boolean NOT NULL DEFAULT false,
    deferral_reason       text,                         -- last deferral reason of plan()
    deferral_detail       text,
    updated_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasks_queue ON tasks (task_id) WHERE complete AND state IN ('queued', 'held');

-- GPU hosts, one per agent registration.
CREATE TABLE nodes (
    node_id       text PRIMARY KEY,
    agent_id      text NOT NULL,
    card_type     text NOT NULL,
    gpus          integer NOT NULL CHECK (gpus >= 1),
    mode          text NOT NULL,
    registered_at timestamptz NOT NULL,
    last_seen     timestamptz NOT NULL,
    alive         boolean NOT NULL DEFAULT true
);

-- Last utilisation each GPU reported (heartbeats).
CREATE TABLE gpu_utilisation (
    node_id        text NOT NULL,
    gpu_index      integer NOT NULL,
    util_pct       double precision NOT NULL,
    memory_used_gb double precision,
    reported_at    timestamptz NOT NULL,
    PRIMARY KEY (node_id, gpu_index)
);

CREATE SEQUENCE fencing_tokens;

CREATE TABLE leases (
    lease_id             text PRIMARY KEY,
    task_id              text NOT NULL,
    run                  integer NOT NULL,
    parts                integer NOT NULL DEFAULT 1,
    node_id              text NOT NULL,
    agent_id             text NOT NULL,
    card_type            text NOT NULL,
    gpu_indices          integer[] NOT NULL,
    fencing_token        bigint NOT NULL UNIQUE,
    granted_at           timestamptz NOT NULL,
    ttl_s                double precision NOT NULL,
    expires_at           timestamptz NOT NULL,
    estimated_end        timestamptz NOT NULL,
    resume_from          text,
    started              boolean NOT NULL DEFAULT false,
    progress             double precision,              -- last reported share done
    output_units         double precision,              -- last reported cumulative output of this run
    last_checkpoint      text,
    last_checkpoint_at   timestamptz,
    last_renewed_at      timestamptz,
    renewals_unreported  integer NOT NULL DEFAULT 0,  -- heartbeats not yet coalesced into lease.renewed
    renewal_reported_at  timestamptz,
    state                text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'ended')),
    ended_at             timestamptz,
    end_reason           text,
    preempting           boolean NOT NULL DEFAULT false,
    preempted_for        text,
    revoke_reason        text,                          -- set when the dispatcher asked the agent to stop
    CHECK ((state = 'ended') = (ended_at IS NOT NULL))
);
CREATE INDEX leases_active_expiry ON leases (expires_at) WHERE state = 'active';
CREATE INDEX leases_active_task ON leases (task_id) WHERE state = 'active';
CREATE INDEX leases_active_agent ON leases (agent_id) WHERE state = 'active';

-- One row per GPU of a lease. The partial unique index is the guarantee that no GPU of a node is
-- in two active leases, whatever the code above it does.
CREATE TABLE lease_gpus (
    lease_id  text NOT NULL REFERENCES leases (lease_id),
    node_id   text NOT NULL,
    gpu_index integer NOT NULL CHECK (gpu_index >= 0),
    active    boolean NOT NULL DEFAULT true,
    PRIMARY KEY (lease_id, gpu_index)
);
CREATE UNIQUE INDEX lease_gpus_one_active_lease ON lease_gpus (node_id, gpu_index) WHERE active;

-- Quota accounts (quota.granted / quota.adjusted) and what each project used (usage.recorded).
CREATE TABLE quota_accounts (
    account_id text PRIMARY KEY,
    project    text NOT NULL,
    gpu_hours  double precision NOT NULL,
    card_type  text,
    valid_from timestamptz NOT NULL,
    valid_to   timestamptz NOT NULL
);
CREATE INDEX quota_accounts_project ON quota_accounts (project);

CREATE TABLE project_usage (
    project     text PRIMARY KEY,
    gpu_seconds double precision NOT NULL DEFAULT 0
);

-- The leader epoch: incremented by each instance that takes the leader lock, checked by every
-- persisting transaction (a deposed leader's writes fail).
CREATE TABLE leader (
    id          integer PRIMARY KEY CHECK (id = 1),
    epoch       bigint NOT NULL,
    holder      text,
    acquired_at timestamptz
);
INSERT INTO leader (id, epoch) VALUES (1, 0);

-- Agent reports that were refused (stale fencing token, foreign lease, ...): never applied.
CREATE TABLE rejected_reports (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    report_id     text NOT NULL,
    report_type   text NOT NULL,
    agent_id      text NOT NULL,
    lease_id      text,
    fencing_token bigint,
    reason        text NOT NULL,
    detail        text NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rejected_reports_reason ON rejected_reports (reason);

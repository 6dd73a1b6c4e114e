-- The console's read models (applied with search_path = views). Written only by the views service.

-- One row per task: the projected TaskView (shared/projection.py) plus columns to filter on.
CREATE TABLE tasks (
    id              text        PRIMARY KEY,
    state           text        NOT NULL,                -- TaskState value
    project         text,                                -- NULL until the submission is seen
    idempotency_key text,
    name            text,
    updated_at      timestamptz NOT NULL,                -- time of the latest event applied
    view            jsonb       NOT NULL                 -- the whole TaskView
);
CREATE INDEX tasks_by_state ON tasks (state, updated_at DESC);
CREATE INDEX tasks_by_updated ON tasks (updated_at DESC);
CREATE INDEX tasks_by_project ON tasks (project, updated_at DESC);
CREATE INDEX tasks_by_idempotency_key ON tasks (idempotency_key);

-- A short history per task for `cardflow status`: each applied event and what the task showed after it.
CREATE TABLE events (
    task_id     text        NOT NULL,
    event_id    text        NOT NULL,
    type        text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    actor       text        NOT NULL,
    state       text        NOT NULL,                    -- the task's state after the event
    reason      text        NOT NULL,
    detail      text        NOT NULL,
    PRIMARY KEY (task_id, event_id)
);
CREATE INDEX events_by_task_time ON events (task_id, occurred_at);

-- The fleet as the dispatcher announced it.
CREATE TABLE nodes (
    node_id       text        PRIMARY KEY,
    agent_id      text        NOT NULL,
    card_type     text        NOT NULL,
    gpus          integer     NOT NULL,
    mode          text        NOT NULL,
    alive         boolean     NOT NULL,
    registered_at timestamptz NOT NULL,
    lost_at       timestamptz,
    detail        text        NOT NULL DEFAULT ''
);

-- Leases: granted, and ended (released / expired / revoked). Rows may be created by either end.
CREATE TABLE leases (
    lease_id    text        PRIMARY KEY,
    task_id     text        NOT NULL,
    node_id     text,
    card_type   text,
    gpu_indices integer[],
    granted_at  timestamptz,
    ended_at    timestamptz,                             -- NULL = in force
    end_reason  text
);
CREATE INDEX leases_active_by_node ON leases (node_id) WHERE ended_at IS NULL;

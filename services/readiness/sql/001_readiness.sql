-- Readiness's tables (applied with search_path = readiness).

-- Every submitted task, from task.submitted until it ends (closed_at set: no longer checked).
CREATE TABLE tasks (
    task_id            text             PRIMARY KEY,
    name               text             NOT NULL,
    project            text             NOT NULL,
    priority_class     text             NOT NULL,
    submitted_at       timestamptz      NOT NULL,              -- occurred_at of task.submitted
    submitted_event_id text             NOT NULL,
    correlation_id     text             NOT NULL,              -- chain the readiness events join
    inputs_total       integer          NOT NULL,
    ready              boolean,                                -- last reported; NULL = not assessed yet
    ready_fraction     double precision,
    missing            jsonb            NOT NULL DEFAULT '[]', -- last reported missing inputs
    ready_since        timestamptz,
    checked_at         timestamptz,
    closed_at          timestamptz,
    closed_by          text                                    -- the event type that ended the task
);
CREATE INDEX tasks_waiting ON tasks (checked_at NULLS FIRST) WHERE closed_at IS NULL AND ready IS NOT TRUE;
CREATE INDEX tasks_open ON tasks (submitted_at) WHERE closed_at IS NULL;

-- Each input of each task and what the last check found.
CREATE TABLE inputs (
    task_id    text        NOT NULL REFERENCES tasks ON DELETE CASCADE,
    position   integer     NOT NULL,
    ref        jsonb       NOT NULL,                             -- as submitted: "s3://..." or {dataset, version}
    kind       text        NOT NULL CHECK (kind IN ('object', 'prefix', 'dataset')),
    key        text        NOT NULL,                             -- s3://bucket/<probed key> or dataset@version
    available  boolean,                                          -- NULL = unknown (not checked, or errors only)
    checked_at timestamptz,
    last_error text,                                             -- the last transient S3 error, if any
    PRIMARY KEY (task_id, position)
);
CREATE INDEX inputs_waiting_by_key ON inputs (key) WHERE available IS NOT TRUE;

-- Dataset versions an upstream system signalled ready (data.ready_signalled).
CREATE TABLE datasets (
    dataset      text        NOT NULL,
    version      text        NOT NULL,
    location     text,
    signalled_at timestamptz NOT NULL,
    event_id     text        NOT NULL,
    PRIMARY KEY (dataset, version)
);

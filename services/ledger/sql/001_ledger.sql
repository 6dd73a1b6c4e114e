-- The ledger's tables (applied with search_path = ledger). Money and GPU time are exact numerics.

-- Project, name and output unit of every submitted task (from task.submitted).
CREATE TABLE tasks (
    task_id      text        PRIMARY KEY,
    project      text        NOT NULL,
    name         text        NOT NULL,
    output_unit  text,
    submitted_at timestamptz NOT NULL
);

-- One row per lease: usage accounted from its grant up to its last renewal, or to its end once closed.
CREATE TABLE lease_usage (
    lease_id           text        PRIMARY KEY,
    task_id            text        NOT NULL,
    project            text        NOT NULL,
    card_type          text        NOT NULL,
    gpus               integer     NOT NULL CHECK (gpus >= 1),
    price_per_gpu_hour numeric     NOT NULL CHECK (price_per_gpu_hour >= 0),  -- catalog price when it opened
    opened_at          timestamptz NOT NULL,
    accounted_until    timestamptz NOT NULL,
    closed_at          timestamptz,                                            -- NULL = still running
    close_reason       text,                                                   -- lease.released reason
    gpu_seconds        numeric     NOT NULL CHECK (gpu_seconds >= 0),
    cost               numeric     NOT NULL CHECK (cost >= 0)
);
CREATE INDEX lease_usage_task ON lease_usage (task_id);
CREATE INDEX lease_usage_project ON lease_usage (project);

-- Every accounted interval of a lease (one per usage.recorded); quotas sum these over their window.
CREATE TABLE usage_increments (
    lease_id    text        NOT NULL,
    from_at     timestamptz NOT NULL,
    to_at       timestamptz NOT NULL CHECK (to_at > from_at),
    task_id     text        NOT NULL,
    project     text        NOT NULL,
    card_type   text        NOT NULL,
    gpus        integer     NOT NULL,
    gpu_seconds numeric     NOT NULL,
    cost        numeric     NOT NULL,
    event_id    text        NOT NULL,   -- the usage.recorded event
    PRIMARY KEY (lease_id, from_at)
);
CREATE INDEX usage_increments_project ON usage_increments (project, to_at);

-- Output per run (lease) of a task, cumulative for that run; a task's output is the sum over its runs.
CREATE TABLE task_output (
    task_id      text        NOT NULL,
    lease_id     text        NOT NULL,
    output_units numeric     NOT NULL CHECK (output_units >= 0),
    final        boolean     NOT NULL,  -- reported by task.succeeded (else: the last checkpoint's)
    reported_at  timestamptz NOT NULL,
    PRIMARY KEY (task_id, lease_id)
);

-- Quota accounts (`cardflow quota grant` writes them with their quota.granted event).
CREATE TABLE quotas (
    account_id      text        PRIMARY KEY,
    project         text        NOT NULL,
    gpu_hours       numeric     NOT NULL CHECK (gpu_hours > 0),
    card_type       text,                      -- NULL = any card type
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz NOT NULL CHECK (valid_to > valid_from),
    alert_lead_days double precision NOT NULL CHECK (alert_lead_days >= 0),
    thresholds      double precision[] NOT NULL,
    granted_at      timestamptz NOT NULL DEFAULT now(),
    granted_by      text        NOT NULL,
    event_id        text        NOT NULL       -- the quota.granted event
);
CREATE INDEX quotas_project ON quotas (project);

-- Alerts already raised: each (account, kind, threshold) once. kind: 'threshold' | 'expiring' (threshold 0).
CREATE TABLE quota_alerts (
    account_id     text             NOT NULL,
    kind           text             NOT NULL CHECK (kind IN ('threshold', 'expiring')),
    threshold      double precision NOT NULL,
    used_gpu_hours numeric          NOT NULL,
    event_id       text             NOT NULL,
    raised_at      timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, kind, threshold)
);

-- Totals. Output units are summed as reported; `output_unit` says 'mixed' when tasks count different things.
CREATE VIEW task_output_totals AS
    SELECT task_id, sum(output_units) AS output_units FROM task_output GROUP BY task_id;

CREATE VIEW task_totals AS
    SELECT u.task_id,
           coalesce(t.project, min(u.project))  AS project,
           t.name,
           t.output_unit,
           count(*)                              AS leases,
           sum(u.gpu_seconds) / 3600             AS gpu_hours,
           sum(u.cost)                           AS cost,
           coalesce(o.output_units, 0)           AS output_units,
           bool_or(u.closed_at IS NULL)          AS running
    FROM lease_usage u
    LEFT JOIN tasks t USING (task_id)
    LEFT JOIN task_output_totals o USING (task_id)
    GROUP BY u.task_id, t.project, t.name, t.output_unit, o.output_units;

CREATE VIEW project_totals AS
    SELECT project,
           count(*)            AS tasks,
           sum(gpu_hours)      AS gpu_hours,
           sum(cost)           AS cost,
           sum(output_units)   AS output_units,
           CASE WHEN count(DISTINCT output_unit) > 1 THEN 'mixed' ELSE min(output_unit) END AS output_unit
    FROM task_totals GROUP BY project;

CREATE VIEW card_totals AS
    SELECT u.card_type,
           count(*)                              AS leases,
           sum(u.gpu_seconds) / 3600             AS gpu_hours,
           sum(u.cost)                           AS cost,
           coalesce(sum(o.output_units), 0)      AS output_units,
           CASE WHEN count(DISTINCT t.output_unit) > 1 THEN 'mixed' ELSE min(t.output_unit) END AS output_unit
    FROM lease_usage u
    LEFT JOIN task_output o USING (task_id, lease_id)
    LEFT JOIN tasks t ON t.task_id = u.task_id
    GROUP BY u.card_type;

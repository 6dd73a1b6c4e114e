-- Governance (issue 12).
--
-- Quota accounts change over their life: GPU-hours adjusted, validity renewed. Every
-- change is a row here with its actor and reason (quota.granted / quota.adjusted carry the same),
-- and the account keeps who changed it last.
ALTER TABLE quotas ADD COLUMN changed_at timestamptz;
ALTER TABLE quotas ADD COLUMN changed_by text;
UPDATE quotas SET changed_at = granted_at, changed_by = granted_by;

CREATE TABLE quota_changes (
    account_id      text        NOT NULL,
    revision        integer     NOT NULL CHECK (revision >= 1),   -- 1 = the grant
    change          text        NOT NULL CHECK (change IN ('grant', 'adjust', 'renew')),
    delta_gpu_hours numeric     NOT NULL,   -- GPU-hours added (negative: removed); the grant's amount for a grant
    gpu_hours       numeric     NOT NULL,   -- the account's GPU-hours after the change
    valid_to        timestamptz NOT NULL,   -- its end of validity after the change
    used_gpu_hours  numeric     NOT NULL,   -- what it had counted under its new terms at that moment
    reason          text        NOT NULL,
    actor           text        NOT NULL,
    changed_at      timestamptz NOT NULL,
    event_id        text        NOT NULL,   -- the quota.granted / quota.adjusted event
    PRIMARY KEY (account_id, revision)
);
INSERT INTO quota_changes (account_id, revision, change, delta_gpu_hours, gpu_hours, valid_to, used_gpu_hours, reason,
                           actor, changed_at, event_id)
    SELECT account_id, 1, 'grant', gpu_hours, gpu_hours, valid_to, 0, '', granted_by, granted_at, event_id FROM quotas;

-- Idle GPU-time: of each accounted interval, the GPU-seconds the dispatcher counted under the
-- policy's idle threshold (lease.renewed / lease.released `idle_gpu_seconds`), per lease and in
-- the totals per task and project.
ALTER TABLE usage_increments ADD COLUMN idle_gpu_seconds numeric NOT NULL DEFAULT 0;
ALTER TABLE lease_usage ADD COLUMN idle_gpu_seconds numeric NOT NULL DEFAULT 0;

CREATE OR REPLACE VIEW task_totals AS
    SELECT u.task_id,
           coalesce(t.project, min(u.project))  AS project,
           t.name,
           t.output_unit,
           count(*)                              AS leases,
           sum(u.gpu_seconds) / 3600             AS gpu_hours,
           sum(u.cost)                           AS cost,
           coalesce(o.output_units, 0)           AS output_units,
           bool_or(u.closed_at IS NULL)          AS running,
           sum(u.idle_gpu_seconds) / 3600        AS idle_gpu_hours
    FROM lease_usage u
    LEFT JOIN tasks t USING (task_id)
    LEFT JOIN task_output_totals o USING (task_id)
    GROUP BY u.task_id, t.project, t.name, t.output_unit, o.output_units;

CREATE OR REPLACE VIEW project_totals AS
    SELECT project,
           count(*)            AS tasks,
           sum(gpu_hours)      AS gpu_hours,
           sum(cost)           AS cost,
           sum(output_units)   AS output_units,
           CASE WHEN count(DISTINCT output_unit) > 1 THEN 'mixed' ELSE min(output_unit) END AS output_unit,
           sum(idle_gpu_hours) AS idle_gpu_hours
    FROM task_totals GROUP BY project;

-- Alerts (services.ledger.alerting): one per alerting event (its id), for the console banner
-- (`console`: a console sink wanted it) and the digest; one delivery per webhook sink, retried with
-- back-off and dead-lettered (status 'dead', with the last error) after max_attempts.
CREATE TABLE alerts (
    alert_id    text        PRIMARY KEY,        -- the source event's id
    kind        text        NOT NULL,           -- shared.alerts.AlertKind
    sentence    text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    event_type  text        NOT NULL,
    task_id     text,
    account_id  text,
    project     text,
    console     boolean     NOT NULL DEFAULT true
);
CREATE INDEX alerts_occurred ON alerts (occurred_at);

CREATE TABLE alert_deliveries (
    alert_id        text             NOT NULL REFERENCES alerts (alert_id),
    url             text             NOT NULL,
    status          text             NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        integer          NOT NULL DEFAULT 0,
    max_attempts    integer          NOT NULL,
    backoff_s       double precision NOT NULL,
    timeout_s       double precision NOT NULL,
    next_attempt_at timestamptz      NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    last_error      text,
    PRIMARY KEY (alert_id, url)
);
CREATE INDEX alert_deliveries_due ON alert_deliveries (next_attempt_at) WHERE status = 'pending';

-- Quota accounts change over their life (issue 12): GPU-hours adjusted, validity renewed. Every
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

-- Output counted like usage: every change of a run's counted output (`task_output.output_units`) is an
-- increment, marked with the round that counted it. Before, a round counted each run's whole cumulative
-- output in the round of its LAST report (`task_output.reported_at`), so a run reported in two rounds
-- (a checkpoint's 500 in R1, the final 1000 in R2) counted 500 + 1000; a report applied after its round
-- had closed fell in no round; and a flag deleted output a closed round had counted. Now a round counts
-- the increments before its end that no round counted (`rounds.load_round_inputs`, in the closing
-- transaction), and a run's increments always add up to its counted output (`outputs.OutputFold`).
CREATE TABLE output_increments (
    increment_id bigserial   PRIMARY KEY,
    task_id      text        NOT NULL,
    lease_id     text        NOT NULL,
    card_type    text,                   -- the lease's, where the ledger had it (a round looks it up otherwise)
    output_units numeric     NOT NULL CHECK (output_units <> 0),  -- negative: a flag took counted output back
    at           timestamptz NOT NULL,   -- when the report, flag or clearing happened (occurred_at)
    cause        text        NOT NULL CHECK (cause IN ('reported', 'flagged', 'cleared', 'backfilled')),
    event_id     text,                   -- the event that caused it; NULL when backfilled below
    round_id     text                    -- the round that counted it; NULL until a round's close marks it
);
CREATE INDEX output_increments_uncounted ON output_increments (at) WHERE round_id IS NULL;
CREATE INDEX output_increments_run ON output_increments (task_id, lease_id);

-- Backfill 1: each run's counted output as one increment at its last report, marked with the closed round
-- that counted it then (a closed round counted the rows reported in it that had a lease row); the others
-- are open: the next round counts them.
INSERT INTO output_increments (task_id, lease_id, card_type, output_units, at, cause, round_id)
SELECT o.task_id, o.lease_id, u.card_type, o.output_units, o.reported_at, 'backfilled',
       (SELECT r.round_id FROM rounds r WHERE u.lease_id IS NOT NULL AND o.reported_at >= r.starts_at
          AND o.reported_at < r.ends_at)
FROM task_output o LEFT JOIN lease_usage u USING (lease_id)
WHERE o.output_units <> 0;

-- Backfill 2: closed rounds keep the output they recorded (per task: `round_lines`). Where a round recorded
-- more or less for a task than the increments now marked with it (a run reported again in a later round,
-- a flagged run whose output it had counted, a report applied after it closed), the difference is marked
-- with that round and taken back in the open round, on the task's latest lease: every closed round's
-- increments add up to what it recorded, and every run's to its counted output.
INSERT INTO output_increments (task_id, lease_id, card_type, output_units, at, cause, round_id)
WITH marked AS (
    SELECT round_id, task_id, sum(output_units) AS units FROM output_increments
    WHERE round_id IS NOT NULL GROUP BY round_id, task_id
), recorded AS (
    SELECT round_id, key AS task_id, output_units AS units FROM round_lines WHERE grouping = 'task'
), gaps AS (
    SELECT round_id, task_id, coalesce(r.units, 0) - coalesce(m.units, 0) AS units
    FROM recorded r FULL JOIN marked m USING (round_id, task_id)
    WHERE coalesce(r.units, 0) <> coalesce(m.units, 0)
)
SELECT g.task_id, coalesce(l.lease_id, ''), l.card_type, side.units, side.at, 'backfilled', side.round_id
FROM gaps g
JOIN rounds r USING (round_id)
LEFT JOIN LATERAL (SELECT lease_id, card_type FROM lease_usage WHERE task_id = g.task_id
                   ORDER BY opened_at DESC, lease_id DESC LIMIT 1) l ON true
CROSS JOIN LATERAL (VALUES (g.units, r.starts_at, r.round_id),
                           (-g.units, (SELECT max(ends_at) FROM rounds), NULL)) AS side(units, at, round_id);

-- Which round reviewed each finished run (its estimate against actual) and listed each flagged success.
-- A round took the final runs and the flagged successes reported in [starts_at, ends_at); one reported
-- before a round's end but applied by the ledger after that round had closed was in no round's review.
-- Now a round's close marks and reads those reported before its end that no round took yet
-- (`rounds.count_finished`, `rounds.count_flagged`); this marks those of closed rounds by the old rule.
ALTER TABLE task_output ADD COLUMN finished_round_id text;
ALTER TABLE flagged_output ADD COLUMN round_id text;
UPDATE task_output o SET finished_round_id = r.round_id
    FROM rounds r WHERE o.final AND o.reported_at >= r.starts_at AND o.reported_at < r.ends_at;
UPDATE flagged_output f SET round_id = r.round_id
    FROM rounds r WHERE f.reported_at >= r.starts_at AND f.reported_at < r.ends_at;
CREATE INDEX task_output_unreviewed ON task_output (reported_at) WHERE final AND finished_round_id IS NULL;

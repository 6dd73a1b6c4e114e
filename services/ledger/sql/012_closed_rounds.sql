-- Which round counted each closed lease (in its preemption losses, when it ended by one). A round took the
-- leases closed in [starts_at, ends_at); one that closed before a round's end but was applied by the ledger
-- after that round had closed was in no round's losses. Now a round's close marks and reads the leases
-- closed before its end that no round took yet (`round_inputs.load_losses`); this marks those of closed
-- rounds by the old rule.
ALTER TABLE lease_usage ADD COLUMN closed_round_id text;
UPDATE lease_usage u SET closed_round_id = r.round_id
    FROM rounds r WHERE u.closed_at >= r.starts_at AND u.closed_at < r.ends_at;
CREATE INDEX lease_usage_uncounted_close ON lease_usage (closed_at) WHERE closed_at IS NOT NULL AND closed_round_id IS NULL;

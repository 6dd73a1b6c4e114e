-- Which round counted each usage increment. A round counts every increment accounted before its end
-- (`to_at < ends_at`) that no earlier round counted — also one the ledger applied after that earlier
-- round had closed (a renewal or release read late): before, a round selected `to_at` in
-- [starts_at, ends_at), and such a late increment fell in no round at all, so the rounds no longer added
-- up to the ledger's totals. Marked in the closing transaction (`rounds.load_round_inputs`).
ALTER TABLE usage_increments ADD COLUMN round_id text;
UPDATE usage_increments i SET round_id = r.round_id
    FROM rounds r WHERE i.to_at >= r.starts_at AND i.to_at < r.ends_at;
CREATE INDEX usage_increments_uncounted ON usage_increments (to_at) WHERE round_id IS NULL;

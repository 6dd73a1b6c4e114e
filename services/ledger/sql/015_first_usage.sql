-- Until the first round closes, the ledger's rounds loop (every 30 s, in every instance) asks where that
-- round starts: the period boundary before the earliest usage, `min(from_at)` of the increments. Without
-- an index on `from_at` that read every increment each time — a table that grows by about one row per task
-- (docs/BENCHMARKS.md, Pipeline session 21). No round closed means no increment counted yet, so the
-- uncounted increments are all of them: partial like `usage_increments_uncounted`, and a closed round's
-- increments leave it.
CREATE INDEX usage_increments_uncounted_from ON usage_increments (from_at) WHERE round_id IS NULL;

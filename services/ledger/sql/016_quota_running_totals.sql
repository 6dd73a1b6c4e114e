-- What each quota account has used so far, kept as a running total: every batch that records usage adds
-- what its increments count inside each account's window (`quotas.ADD_COUNTED_SQL`, in the statement that
-- inserts them, under the usage lock), a grant starts it at the usage already inside its window, and a
-- change of the window counts it again once. Before, the quota check (every 30 s, in every ledger
-- instance) re-summed each account's whole window from `usage_increments` (docs/BENCHMARKS.md, Pipeline
-- session 22): a read that grew with the usage inside the window. Here the existing accounts are counted
-- once, the way `quotas.USED_GPU_SECONDS_SQL` counts them.
ALTER TABLE quotas ADD COLUMN used_gpu_seconds numeric NOT NULL DEFAULT 0;
UPDATE quotas q SET used_gpu_seconds = coalesce((
    SELECT sum(i.gpus * extract(epoch FROM least(i.to_at, q.valid_to) - greatest(i.from_at, q.valid_from)))
    FROM usage_increments i
    WHERE i.project = q.project AND (q.card_type IS NULL OR i.card_type = q.card_type)
      AND i.to_at > q.valid_from AND i.from_at < q.valid_to), 0);

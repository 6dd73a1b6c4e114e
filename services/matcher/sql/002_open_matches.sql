-- Open matches: a task matched but not yet granted is re-ranked when a registration grows the fleet.

-- 'granted' = the dispatcher leased GPUs for it (lease.granted); 'finished' = it ended without
-- being cancelled (task.succeeded / task.failed / task.rejected). Both close the match for good.
ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('matched', 'waiting', 'unmatchable', 'granted', 'finished', 'cancelled'));

-- The adequate card types of the latest match, in rank order (a re-match emits only when it changes).
ALTER TABLE tasks ADD COLUMN last_ranked jsonb NOT NULL DEFAULT '[]';
UPDATE tasks AS t
   SET last_ranked = coalesce((
       SELECT jsonb_agg(r->>'card_type' ORDER BY (r->>'rank')::int)
         FROM jsonb_array_elements(m.ranking) AS r
        WHERE r->>'rank' IS NOT NULL), '[]')
  FROM matches AS m
 WHERE m.match_id = t.last_match_id AND t.status = 'matched';

-- 'matched' = open: loaded on every registration that adds GPUs.
CREATE INDEX tasks_open ON tasks (task_id) WHERE status = 'matched';

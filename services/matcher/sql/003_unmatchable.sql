-- Unmatchable tasks (no card type of the catalog can run them) are decided again when a new card
-- catalog comes into force (`config.changed` of `cards`).
CREATE INDEX tasks_unmatchable ON tasks (task_id) WHERE status = 'unmatchable';

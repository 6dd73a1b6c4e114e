-- views.events gets about eight rows per task, each written once and read back only as text by the
-- views service (`task_history`, the story). Two costs per row that buy nothing:
-- * `facts` as jsonb parsed every row's text into jsonb's binary form; as json it is the text, checked
--   to be JSON (`facts->>'key'` still works);
-- * the index `events_by_task_time (task_id, occurred_at)` beside the primary key (task_id, event_id):
--   the one lookup by task (`task_history`: WHERE task_id = $1 ORDER BY occurred_at, event_id) finds a
--   task's few rows through the primary key's leading column and sorts them; the queue series reads the
--   whole table either way.
-- Together about a third of PostgreSQL's CPU per history row (docs/BENCHMARKS.md, Pipeline session 10).
ALTER TABLE events ALTER COLUMN facts TYPE json USING facts::json;
DROP INDEX events_by_task_time;

-- audit.events gets about nine rows per task, each into every index. `events_time (occurred_at)` served
-- no query: the reads by time also name types (`events_type_time`: capacity, review decisions) or walk
-- `seq` (replay up to a time, segments, verify, the change log newest first). Dropped; the other six stay, each
-- the index of a real read (task story, subject signals, types, actors, seq, event_id)
-- (docs/BENCHMARKS.md, Pipeline session 10).
DROP INDEX events_time;

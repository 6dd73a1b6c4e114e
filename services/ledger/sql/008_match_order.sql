-- Which of two matches of a task with the same `matched_at` is the later one: the matcher numbers its
-- events per task (`subject_seq`), in the order it committed them. With it, a redelivered older match
-- never replaces a newer one, so `task.matched` needs no inbox row (`batch.is_repeatable`).
-- Rows written before this migration count as 0 (any later match of the same instant replaces them).
ALTER TABLE task_matches ADD COLUMN subject_seq bigint NOT NULL DEFAULT 0;

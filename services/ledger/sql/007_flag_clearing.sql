-- A person checked a flagged success's output and cleared the flag (`task.flag_cleared`, actor and
-- reason): the row stays as the record, marked cleared, and its output moves into `task_output`
-- (counted from the moment of clearing), once: only a row not cleared yet is moved.
ALTER TABLE flagged_output
    ADD COLUMN cleared_at      timestamptz,
    ADD COLUMN cleared_by      text,
    ADD COLUMN clear_reason    text,
    ADD COLUMN clear_event_id  text;

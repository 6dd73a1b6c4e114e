-- Why an export was written: a manual export's reason (required), the daily loop's own sentence.
ALTER TABLE exports ADD COLUMN reason text NOT NULL DEFAULT '';

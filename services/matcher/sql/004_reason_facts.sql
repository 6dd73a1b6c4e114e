-- The numbers behind a match's sentence (services/matcher/match_reasons.py): the chosen card's cost
-- and runtime, the runner-up's, an oversized choice's smaller alternative and why the task was
-- matched again, so the console can say it in the reader's language. NULL for unmatchable tasks and
-- for matches written before this column existed (their English sentence is shown).
ALTER TABLE matches ADD COLUMN reason_facts jsonb;

-- The values behind each history line's Chinese sentence (services.console.sentences.sentence_fields of
-- the view after the event), so the story renders it from structured fields; NULL on rows written before.
ALTER TABLE events ADD COLUMN facts jsonb;

-- views.tasks.view is rewritten whole about five times per task (once per views batch that touches the
-- task), ~2 KB each time. As jsonb every write parsed the text into jsonb's binary form (~2.6 KB) and,
-- the row then being over the ~2 KB TOAST threshold, pglz-compressed it; the views service reads it
-- back as text. Stored as json (the text, checked to be JSON) and never compressed (toast_tuple_target:
-- rows up to ~8 KB stay inline as they are), an upsert costs PostgreSQL about half the CPU per row
-- (docs/BENCHMARKS.md, Pipeline session 9). `view->>'key'` works on json as on jsonb (it reads the text).
ALTER TABLE tasks ALTER COLUMN view TYPE json USING view::json;
ALTER TABLE tasks SET (toast_tuple_target = 8160);

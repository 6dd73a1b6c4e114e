-- matcher.matches gets one row per decision, its `ranking` alone ~2.6 KB of JSON. As jsonb every
-- insert converted four JSON texts to jsonb's binary form and pglz-compressed the row (over the ~2 KB
-- TOAST threshold); its readers (the console's match routes) read them back as text. Stored as json
-- (the text, checked to be JSON) and never compressed, an insert costs PostgreSQL about half the CPU
-- per row (docs/BENCHMARKS.md, Pipeline session 9), as for views.tasks (console migration 004).
ALTER TABLE matches
    ALTER COLUMN request TYPE json USING request::json,
    ALTER COLUMN ranking TYPE json USING ranking::json,
    ALTER COLUMN fleet TYPE json USING fleet::json,
    ALTER COLUMN reason_facts TYPE json USING reason_facts::json;
ALTER TABLE matches SET (toast_tuple_target = 8160);

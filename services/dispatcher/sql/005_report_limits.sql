-- Report rate caps (issue 15 item 2, `shared.leasing.screening.rate_cap`): the time scale each
-- agent registered (a simulated agent's --time-scale; real agents 1), since caps count in the
-- agent's time; and how many alike refusals one rejected_reports row stands for (`rate_limited`
-- refusals are counted per lease and batch, so a report storm is a few rows, not millions).
ALTER TABLE nodes ADD COLUMN time_scale double precision NOT NULL DEFAULT 1;
ALTER TABLE rejected_reports ADD COLUMN count integer NOT NULL DEFAULT 1;

-- The leader epoch check as one function, so a write step sends it in its BEGIN's round trip
-- (`leader.FencedTransaction`) instead of a round trip of its own. It reads the row FOR SHARE, as
-- the check did before: while the step runs, a new leader's epoch increment waits for it. A stale
-- epoch raises SQLSTATE CF001, which the dispatcher turns into `LeadershipLost`.
CREATE FUNCTION check_leader_epoch(expected bigint) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    current_epoch bigint;
BEGIN
    SELECT epoch INTO current_epoch FROM leader WHERE id = 1 FOR SHARE;
    IF current_epoch IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'leader epoch is %, this instance holds %', current_epoch, expected
            USING ERRCODE = 'CF001';
    END IF;
END
$$;

-- Operators' verbs (issue 16): a drained node takes no new leases (`NodeRecord.takes_leases`); the
-- leases running on it finish. (A hold is a task's state `held` with deferral_reason `operator`: no
-- column of its own.) Version 003 is governance's.
ALTER TABLE nodes ADD COLUMN drained boolean NOT NULL DEFAULT false;
ALTER TABLE nodes ADD COLUMN drain_reason text NOT NULL DEFAULT '';

-- Operators' drain (issue 16): a drained node takes no new leases; who drained it, when and why.
ALTER TABLE nodes ADD COLUMN drained boolean NOT NULL DEFAULT false;
ALTER TABLE nodes ADD COLUMN drained_at timestamptz;
ALTER TABLE nodes ADD COLUMN drained_by text NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN drain_reason text NOT NULL DEFAULT '';

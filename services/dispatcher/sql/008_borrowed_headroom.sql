-- Whether the lease's grant took headroom GPUs as a standard filler (`Grant.borrowed_headroom`, with
-- `Policy.checkpointing_standard_borrows`): its GPUs keep covering the headroom and core work past its grace
-- may preempt it, as the simulator decides. Kept so a dispatcher that reloads its leases (a restart, a new
-- leader) plans from the same flag. Leases stored before it borrowed nothing: the dispatcher refused the setting.
ALTER TABLE leases ADD COLUMN borrowed_headroom boolean NOT NULL DEFAULT false;

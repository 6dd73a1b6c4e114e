-- When each closed lease's run last checkpointed, as its `lease.released` says (the dispatcher's lease row
-- carries it). A round's preemption losses count a lost run's GPU time from there. Before, the round's close
-- read the last `task.checkpointed` from `audit.events`, which the archiver may not have written yet when the
-- round closes: a checkpoint it had not archived counted the run's whole time as lost. Leases closed before
-- this column (NULL) are still read from `audit.events` (`round_inputs.load_losses`).
ALTER TABLE lease_usage ADD COLUMN last_checkpoint_at timestamptz;

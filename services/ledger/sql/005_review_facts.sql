-- The match review's facts per lease (issue 13).
--
-- GPU utilisation: of the accounted GPU-seconds, those whose lease.renewed / lease.released
-- reported the mean utilisation of the lease's GPUs (util_gpu_seconds), and that share of them
-- (busy_gpu_seconds = Σ interval GPU-seconds x util % / 100). busy / util is the lease's mean
-- utilisation, time-weighted over the intervals that reported it.
--
-- time_scale: the node's clock speed from lease.granted (a simulated agent's --time-scale; 1 for a
-- real agent). The review multiplies runtimes by it; billing (gpu_seconds, cost) stays wall-clock.
ALTER TABLE lease_usage ADD COLUMN util_gpu_seconds numeric NOT NULL DEFAULT 0;
ALTER TABLE lease_usage ADD COLUMN busy_gpu_seconds numeric NOT NULL DEFAULT 0;
ALTER TABLE lease_usage ADD COLUMN time_scale double precision NOT NULL DEFAULT 1 CHECK (time_scale > 0);

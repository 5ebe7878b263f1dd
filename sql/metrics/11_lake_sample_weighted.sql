-- Each sample weighs the time until the next sample of the same device (the last one: the time
-- since the previous), capped at samples.max_gap_s so that a gap in the record does not let one
-- sample stand for hours.
-- time_ms (epoch ms) stands in for date_diff('millisecond', ...), which Spark spells otherwise;
-- `OVER w` is parenthesised because Spark's parser reads `OVER w - x` as a window named `w-x`.
-- The consumers filter on `device`, a partition column of the window: both engines push that
-- filter below the window, so each sample is weighed once (GPU rows for the GPUs, cpu rows for the
-- CPU), not once per consumer.
-- A MIG instance's util_pct is its GPM SM activity (the `samples` view's rule, which the lake's
-- files are exported through).
SELECT s.cluster, s.job_id_raw, s.host, s.device, s.source, s.gpu_index, s.time, s.util_pct,
       s.mem_used_bytes, s.mem_total_bytes, s.energy_j, s.power_w, s.sm_active_pct,
       LEAST(COALESCE((LEAD(s.time_ms) OVER w) - s.time_ms,
                      s.time_ms - (LAG(s.time_ms) OVER w), 0) / 1e3,
             c.max_gap_s) AS weight_s
FROM lake_samples s
JOIN lake_config c ON c.cluster = s.cluster
WINDOW w AS (PARTITION BY s.cluster, s.job_id_raw, s.host, s.device ORDER BY s.time)

-- sql/views/10_samples.sql sample_weighted: each sample weighs the time until the next sample of
-- the same device (the last one: the time since the previous), capped at samples.max_gap_s.
-- time_ms (epoch ms) stands in for date_diff('millisecond', ...), which Spark spells otherwise;
-- `OVER w` is parenthesised because Spark's parser reads `OVER w - x` as a window named `w-x`.
SELECT s.cluster, s.job_id_raw, s.host, s.device, s.source, s.gpu_index, s.time_ms,
       s.util_pct, s.mem_used_bytes, s.mem_total_bytes,
       LEAST(COALESCE((LEAD(s.time_ms) OVER w) - s.time_ms,
                      s.time_ms - (LAG(s.time_ms) OVER w), 0) / 1e3,
             COALESCE(c.max_gap_s, 600e0)) AS weight_s
FROM lake_samples s
LEFT JOIN lake_config c ON c.cluster = s.cluster
WINDOW w AS (PARTITION BY s.cluster, s.job_id_raw, s.host, s.device ORDER BY s.time_ms)

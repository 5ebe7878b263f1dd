-- `jobsight watch` (analytics/watch.py): which running jobs' owners to notify of idle GPUs.

-- One row per running job with GPUs idle (under flags.gpu_idle_pct, running_gpus' idle_min) for at
-- least watch.idle_hours at their latest samples: how many, the longest and shortest of those idle
-- runs, their GPU indexes, and idle_sbu_per_h, the share of the job's SBU per hour (its SBU so far
-- over its elapsed time) that pays for them (GPU-charged jobs; running_jobs' rule).
CREATE OR REPLACE VIEW watch_idle_jobs AS
WITH g AS (
    SELECT cluster, job_id_raw, count(*) AS gpus_idle, max(idle_min) AS idle_max_min, min(idle_min) AS idle_min,
           string_agg(coalesce(CAST(gpu_index AS VARCHAR), device), ', ' ORDER BY gpu_index, device) AS idle_gpus,
           max(last_time) AS last_sample
    FROM running_gpus
    WHERE idle_min >= setting_value('watch.idle_hours') * 60
    GROUP BY cluster, job_id_raw
)
SELECT r.cluster, r.job_id, r.job_id_raw, r.job_name, r."user", r.account, r."partition", r.start_time,
       r.elapsed_s, r.ngpus, r.sbu, r.sbu_per_h, g.gpus_idle, g.idle_min, g.idle_max_min, g.idle_gpus,
       CASE WHEN r.charge_driver = 'gpu' AND r.ngpus > 0 THEN r.sbu_per_h * g.gpus_idle / r.ngpus END AS idle_sbu_per_h,
       g.last_sample
FROM running_jobs r
JOIN g USING (cluster, job_id_raw);

-- The idle jobs to notify at time `at_time` (UTC): those with an owner, whose notice was never attempted
-- (a 'failed' attempt is retried), whose owner is not in watch.opt_out; rate_limited when the
-- owner's notices attempted in the 24 hours before `at_time`, plus this one's rank among the owner's
-- (the most idle GPUs first, then the longest idle), exceed watch.max_per_user_per_day.
CREATE OR REPLACE MACRO watch_due(at_time) AS TABLE
WITH attempted AS (
    SELECT DISTINCT cluster, job_id_raw FROM watch_notice WHERE outcome <> 'failed'
), recent AS (
    SELECT "user", count(*) AS notices FROM watch_notice
    WHERE outcome <> 'failed' AND sent_at > CAST(at_time AS TIMESTAMP) - INTERVAL 1 DAY
    GROUP BY "user"
), c AS (
    SELECT i.*, row_number() OVER (PARTITION BY i."user"
                              ORDER BY i.gpus_idle DESC, i.idle_max_min DESC, i.cluster, i.job_id_raw) AS user_rank
    FROM watch_idle_jobs i
    ANTI JOIN attempted a ON a.cluster = i.cluster AND a.job_id_raw = i.job_id_raw
    WHERE coalesce(i."user", '') <> ''
      AND NOT list_contains(string_split(setting_text('watch.opt_out'), ','), i."user")
)
SELECT c.*, coalesce(r.notices, 0) AS notices_24h,
       coalesce(r.notices, 0) + c.user_rank > setting_value('watch.max_per_user_per_day') AS rate_limited
FROM c LEFT JOIN recent r ON r."user" = c."user"
ORDER BY c."user", c.user_rank;

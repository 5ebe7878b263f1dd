-- The stored flags are job_flag_codes (codes, severities, advised resizes); job_flags becomes a view
-- over them that formats each flag's message and advice when read (sql/views/30_job_flags.sql).
-- The next refresh builds job_flag_codes and what reads it.
DROP TABLE IF EXISTS job_flags;
DELETE FROM metric_state WHERE name = 'definitions.job_flags';

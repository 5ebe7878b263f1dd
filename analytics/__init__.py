"""jobsight analytics: ingest accounting and samples into DuckDB, compute metrics from sql/."""

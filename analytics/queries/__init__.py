"""The read API: every figure any face shows (the command line, reports, the dashboard, /metrics,
watch notices) comes from a function here, asked with a Scope (who may see what) and Filters
(period, user, account, ...; scope.py). The SQL they run is in sql/."""

"""Weekly reports (`jobsight report`): per user, per account (project) and for the admins.

period     the report window: ISO week, `last`, or --since/--until
settings   [report] and [email] options of jobsight.toml, validated
data       every number, read from the report macros in sql/views/50_report.sql
summary    the plain-language paragraph at the top of each report
sections   what each report shows (titled tables), shared by every format
html, markdown, text, csvout   renderers (each escapes user-supplied strings for its target)
mailer     multipart text + HTML messages, written as .eml or sent over SMTP
"""

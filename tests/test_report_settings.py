"""[report] and [email] in jobsight.toml: defaults, recipients, and clear errors for mistakes."""
from __future__ import annotations

import pytest

from jobsight.analytics.config import ConfigError, parse_config
from jobsight.analytics.errors import UserError
from jobsight.analytics.reports.settings import from_config


def test_defaults_and_addresses():
    s = from_config(parse_config({}))
    assert (s.top_jobs, s.trend_weeks, s.smtp) == (10, 4, "localhost:25")
    assert s.address_of("alice") is None
    cfg = parse_config({"email": {"user_address": "{user}@uni.example", "addresses": {"bob": "b@x.example"}},
                        "roles": {"leads": {"proj-a": ["carol"], "proj-b": "dave"}},
                        "report": {"top_jobs": 3, "budget_period": "year"}})
    s = from_config(cfg)
    assert s.address_of("alice") == "alice@uni.example" and s.address_of("bob") == "b@x.example"
    assert s.leads == {"proj-a": ["carol"], "proj-b": ["dave"]}
    assert (s.top_jobs, cfg.budget["period"]) == (3, "year")


@pytest.mark.parametrize("data, needle", [
    ({"report": {"top_job": 3}}, "unknown key report.top_job"),
    ({"report": {"top_jobs": 0}}, "report.top_jobs must be a whole number from 1 to 1000, got 0"),
    ({"report": {"top_jobs": 10**19}}, "report.top_jobs must be a whole number from 1 to 1000, got 10000000000000000000"),
    ({"report": {"trend_weeks": 10**10}}, "report.trend_weeks must be a whole number from 1 to 520, got 10000000000"),
    ({"report": {"trend_weeks": -4}}, "report.trend_weeks must be a whole number from 1 to 520, got -4"),
    ({"email": {"user_address": "alice@example.org"}}, "must contain {user}"),
    ({"email": {"user_address": "{user}@{domain}"}}, "may use only {user}"),
    ({"email": {"user_address": "{user:>999999999}@x.org"}}, "email.user_address"),   # never formatted: no 1 GB string
    ({"email": {"user_address": "{user!r}@x.org"}}, "email.user_address"),
    ({"email": {"user_address": "{user}@x.org{"}}, "may use only {user}"),
    ({"email": {"user_address": "{user}@{user:>999999999}"}}, "may use only {user}"),
    ({"email": {"admins": "ops@example.org"}}, "email.admins must be a list"),
    ({"email": {"form": "x@example.org"}}, "unknown key email.form"),
])
def test_mistakes_are_named(data, needle):
    with pytest.raises(UserError, match=needle.replace("{", r"\{").replace("}", r"\}")):
        from_config(parse_config(data))


@pytest.mark.parametrize("data, needle", [
    ({"report": {"budget_period": "fortnight"}}, "report.budget_period must be one of"),
    ({"report": {"budget_start": "1st of May"}}, "report.budget_start must be a date"),
    ({"budget_options": {"warn_pct": 90, "over_pct": 80}}, "warn_pct must not be above over_pct"),
    ({"budget_options": {"warn": 90}}, "unknown key budget_options.warn"),
    ({"budgets": {"proj-a/alice/x": 9}}, "a budget key is an account or"),
])
def test_budget_mistakes_are_named(data, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_config(data)

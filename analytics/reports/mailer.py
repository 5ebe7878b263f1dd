"""E-mail the reports: one multipart/alternative message (text + HTML) per recipient, written as
.eml files or sent over SMTP (smtplib, no authentication: a site relay).

Who gets what: a user report goes to the user ([email.addresses], else the user_address template);
a project report to the account's leads ([roles] leads); the admin report to [email] admins.
A report without jobs in the window is never mailed.
"""
from __future__ import annotations

import smtplib
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

from jobsight.analytics.errors import UserError
from jobsight.analytics.reports.html import render_html
from jobsight.analytics.reports.report import Report
from jobsight.analytics.reports.settings import ReportSettings
from jobsight.analytics.reports.text import render_text


@dataclass
class Delivery:
    report: Report
    recipients: list[str]
    skipped: str = ""          # why nobody gets this report

    def describe(self) -> str:
        if self.skipped:
            return f"no email  {self.report.stem}: {self.skipped}"
        return f"would send {self.report.stem} (text + HTML) to {', '.join(self.recipients)}"


def plan(rep: Report, s: ReportSettings) -> Delivery:
    if not rep.has_jobs:
        return Delivery(rep, [], f"no jobs in {rep.period.label}")
    if rep.kind == "user":
        addr = s.address_of(rep.name)
        return Delivery(rep, [addr] if addr else [],
                        "" if addr else "no address (set [email] user_address or [email.addresses])")
    if rep.kind == "account":
        leads = s.leads.get(rep.name, [])
        addrs = [a for a in (s.address_of(u) for u in leads) if a]
        return Delivery(rep, addrs, "" if addrs else f"no leads with an address ([roles] leads.{rep.name})")
    return Delivery(rep, list(s.admins), "" if s.admins else "no admin addresses ([email] admins)")


def subject(rep: Report, s: ReportSettings) -> str:
    t = rep.totals
    wasted = "" if t["wasted_sbu"] is None else f", {t['wasted_sbu']:,.1f} wasted"
    who = {"user": "Your", "account": f"Project {rep.name}:", "admin": "Cluster:"}[rep.kind]
    text = f"{s.subject_prefix} {who} {rep.period.noun()} {rep.period.label}: {t['sbu']:,.1f} SBU burned{wasted}"
    return " ".join(text.split())   # no newline can reach a header


def message(d: Delivery, s: ReportSettings, recipient: str) -> EmailMessage:
    if not s.sender:
        raise UserError("--email needs a sender: set `from` in [email] of jobsight.toml")
    msg = EmailMessage()
    msg["From"] = s.sender
    msg["To"] = recipient
    msg["Subject"] = subject(d.report, s)
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = make_msgid(domain=s.sender.rpartition("@")[2] or None)
    msg["X-Jobsight-Report"] = d.report.stem
    msg.set_content(render_text(d.report))
    msg.add_alternative(render_html(d.report, charts=False), subtype="html")
    return msg


def write_eml(deliveries: list[Delivery], s: ReportSettings, eml_dir: Path) -> list[Path]:
    written = []
    for d in deliveries:
        for i, rcpt in enumerate(d.recipients):
            folder = eml_dir / d.report.period.label
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / (f"{d.report.stem}.eml" if len(d.recipients) == 1 else f"{d.report.stem}-{i + 1}.eml")
            path.write_bytes(bytes(message(d, s, rcpt)))
            written.append(path)
    return written


def connect_smtp(server: str) -> smtplib.SMTP:
    """A session with the site relay at host:port (no authentication); `jobsight watch` sends through it too."""
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--smtp {server!r}: use host:port, e.g. localhost:25")
    return smtplib.SMTP(host, int(port), timeout=30)


def send_smtp(deliveries: list[Delivery], s: ReportSettings, server: str) -> int:
    sent = 0
    try:
        with connect_smtp(server) as smtp:
            for d in deliveries:
                for rcpt in d.recipients:
                    smtp.send_message(message(d, s, rcpt), from_addr=s.sender, to_addrs=[rcpt])
                    sent += 1
    except (OSError, smtplib.SMTPException) as exc:
        raise UserError(f"SMTP {server}: {exc} ({sent} message(s) sent before the error)") from None
    return sent

"""E-mail the reports: one multipart/alternative message (text + HTML) per recipient, written as
.eml files or sent over SMTP (smtplib, no authentication: a site relay).

Who gets what: a user report goes to the user ([email.addresses], else the user_address template);
a project report to the account's leads ([roles] leads); the admin report to [email] admins.
A report without jobs in the window is never mailed. Every message is sent (or written) on its
own: a refused recipient or a file that cannot be written is listed and the others still go.
"""
from __future__ import annotations

import contextlib
import smtplib
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

from jobsight.analytics.errors import UserError
from jobsight.analytics.reports.files import Failure, make_folder, reason, write_each
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


def eml_name(d: Delivery, i: int) -> str:
    """<stem>.eml, or <stem>~<n>.eml per recipient when there are several: '~' is in no stem used
    as the name itself, and a hashed stem ends in 12 hex digits, so no two reports share a name."""
    return f"{d.report.stem}.eml" if len(d.recipients) == 1 else f"{d.report.stem}~{i + 1}.eml"


def write_eml(deliveries: list[Delivery], s: ReportSettings, eml_dir: Path) -> tuple[list[Path], list[Failure]]:
    """(written files, failures): each message written whole (files.atomic_write), one failure
    never stopping the others."""
    for folder in dict.fromkeys(eml_dir / d.report.period.label for d in deliveries):
        make_folder(folder, "--eml-dir")
    return write_each((eml_dir / d.report.period.label / eml_name(d, i), _content(d, s, rcpt))
                      for d in deliveries for i, rcpt in enumerate(d.recipients))


def _content(d: Delivery, s: ReportSettings, rcpt: str):
    return lambda: [bytes(message(d, s, rcpt))]


def connect_smtp(server: str) -> smtplib.SMTP:
    """A session with the site relay at host:port (no authentication); `jobsight watch` sends through it too."""
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--smtp {server!r}: use host:port, e.g. localhost:25")
    return smtplib.SMTP(host, int(port), timeout=30)


def _reply(code, text) -> str:
    """The server's reply as one line: "550 5.1.1 no such user"."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return " ".join(f"{code} {text}".split())


def send_smtp(deliveries: list[Delivery], s: ReportSettings, server: str) -> tuple[int, list[Failure]]:
    """(messages sent, failures): each message goes on its own, so a refused recipient, sender or
    message costs that message only. A message whose session the server dropped is tried once more
    on a new session, so a relay that drops sessions loses nothing (a drop after the message's last
    line, before the reply, could deliver it twice). The run stops, the rest listed, only when the
    server cannot be reached again; before the first message that is a usage error."""
    todo = [(d, rcpt) for d in deliveries for rcpt in d.recipients]
    sent, failures = 0, []
    smtp: smtplib.SMTP | None = None
    for i, (d, rcpt) in enumerate(todo):
        what = f"{d.report.stem} to {rcpt}"
        try:
            msg = message(d, s, rcpt)
        except Exception as exc:        # a report that cannot be rendered: this message only
            failures.append(Failure(what, reason(exc)))
            continue
        for retry in (False, True):
            if smtp is None:
                try:
                    smtp = connect_smtp(server)
                except (OSError, smtplib.SMTPException) as exc:
                    if not sent and not failures:
                        raise UserError(f"SMTP {server}: {exc} (0 message(s) sent)") from None
                    failures += [Failure(f"{dd.report.stem} to {r}", f"SMTP {server}: {reason(exc)}")
                                 for dd, r in todo[i:]]
                    return sent, failures
            try:
                smtp.send_message(msg, from_addr=s.sender, to_addrs=[rcpt])
                sent += 1
            except smtplib.SMTPRecipientsRefused as exc:
                failures.append(Failure(what, "refused: " + _reply(*exc.recipients.get(rcpt, ("", "")))))
            except smtplib.SMTPResponseException as exc:    # sender or data refused; smtplib reset the session
                failures.append(Failure(what, "refused: " + _reply(exc.smtp_code, exc.smtp_error)))
                if exc.smtp_code == 421:                     # the server is closing the session
                    smtp = _close(smtp)
            except (smtplib.SMTPServerDisconnected, ConnectionError) as exc:
                smtp = _close(smtp)
                if not retry:
                    continue
                failures.append(Failure(what, f"SMTP {server}: {reason(exc)}"))
            except (OSError, smtplib.SMTPException) as exc:  # a timeout: not tried again, the next on a new session
                failures.append(Failure(what, f"SMTP {server}: {reason(exc)}"))
                smtp = _close(smtp)
            break
    if smtp is not None:
        _close(smtp, quit=True)
    return sent, failures


def _close(smtp: smtplib.SMTP, quit: bool = False) -> None:
    """Close the session (politely with ``quit``); None, for ``smtp = _close(smtp)``."""
    with contextlib.suppress(OSError, smtplib.SMTPException):
        if quit:
            smtp.quit()
    smtp.close()
    return None

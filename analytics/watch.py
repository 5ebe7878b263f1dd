"""`jobsight watch`'s notices: the owner of a running job whose GPUs sit idle gets one plain-text
e-mail about it, through the reports' mailer (analytics/reports/mailer.py: SMTP, or .eml files).

Which jobs, and which are held back by the per-user limit, is sql/views/80_watch.sql (watch_due);
[watch] opt_out is in that SQL too. Each attempt is a watch_notice row (sql/schema/0009): committed
as 'sending' before the message leaves and updated after, so a crash in between never sends that
job's notice again; a failed attempt is tried again in the next cycle.

Text the users wrote (the job name) and sacct's user names are data: every control and bidi
character is shown as a visible escape, and no header carries them.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import smtplib
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Callable, Optional

from jobsight.analytics.queries import notices
from jobsight.analytics.render import terminal_safe
from jobsight.analytics.reports.settings import ReportSettings
from jobsight.analytics.store.database import Database

NAME_CHARS = 200      # a job name longer than this is cut in the message
# one plain address: no space, comma, angle bracket or quote can add a recipient or a header
_ADDRESS_RE = re.compile(r"^[^\s<>,;\"'()\\\[\]]+@[^\s<>,;\"'()\\\[\]@]+$")
_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class Outcome:
    """What a cycle's notices did, for its log line."""
    sent: list[str] = field(default_factory=list)          # "job -> address"
    failed: list[str] = field(default_factory=list)
    rate_limited: list[str] = field(default_factory=list)
    no_address: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.sent)} notice(s) sent, {len(self.failed)} failed, "
                f"{len(self.rate_limited)} held by the per-user limit, {len(self.no_address)} without an address")


def address_of(user: str, s: ReportSettings) -> Optional[str]:
    """The user's address ([email.addresses], else user_address), when it is one plain address."""
    addr = s.address_of(user)
    return addr if addr and _ADDRESS_RE.match(addr) else None


def _text(value) -> str:
    """User-written or scheduler text shown in the body: one line, escapes visible."""
    text = terminal_safe("" if value is None else str(value))
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS] + "..."


def _header(value) -> str:
    """A header value from our own figures and ids: printable characters on one line."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in str(value)).split())


def _hours(minutes: float) -> str:
    m = int(round(minutes or 0))
    return f"{m // 60} h {m % 60:02d} min"


def _when(t) -> str:
    return t.strftime("%Y-%m-%d %H:%M UTC") if t is not None else "unknown"


def subject(row: dict, s: ReportSettings) -> str:
    return _header(f"{s.subject_prefix} Job {row['job_id']}: {row['gpus_idle']} GPU(s) idle for "
                   f"{_hours(row['idle_max_min'])}")


def body(row: dict, s: ReportSettings, gpu_idle_pct: float, idle_hours: float) -> str:
    job = _text(row["job_id"])
    burn = (f"{row['sbu_per_h']:,.1f} SBU per hour" if row["sbu_per_h"] is not None
            else "unknown (no charge recorded yet)")
    if row["idle_sbu_per_h"] is not None:
        burn += f", of which {row['idle_sbu_per_h']:,.1f} SBU per hour pays for the idle GPU(s)"
    admins = ", ".join(s.admins) if s.admins else "your cluster's administrators"
    lines = [
        f"Your job {job} has had {row['gpus_idle']} of its {row['ngpus'] or row['gpus_idle']} GPU(s) idle "
        f"(under {gpu_idle_pct:g} % utilisation) for more than {idle_hours:g} hour(s), while it is still running.",
        "",
        f"  Job:        {job} (cluster {_text(row['cluster'])}, partition {_text(row['partition'])}, "
        f"account {_text(row['account'])})",
        f"  Name:       {_text(row['job_name'])}",
        f"  User:       {_text(row['user'])}",
        f"  Started:    {_when(row['start_time'])}",
        f"  Idle GPUs:  {_text(row['idle_gpus'])}, idle for {_hours(row['idle_min'])}"
        + (f" to {_hours(row['idle_max_min'])}" if round(row["idle_max_min"]) != round(row["idle_min"]) else "")
        + f" at the latest samples ({_when(row['last_sample'])})",
        f"  Burning:    {burn}",
        "",
        "What to do:",
        "  - If the job no longer needs its GPUs (its GPU work is done, or it is stuck), end it:",
        f"        scancel {job}",
        "    and run what is left with fewer GPUs or none.",
        "  - If it should be using them, check that your program runs on the GPU it was given",
        "    (that it sees the device, and is not waiting on input, a lock or another job), and fix it.",
        "",
        "This is the only message about this job. To get no more of these messages, ask",
        f"{admins} to add your user name to opt_out in the [watch] section of jobsight.toml.",
        "",
        "-- ",
        "jobsight watch",
    ]
    return "\n".join(lines) + "\n"


def message(row: dict, s: ReportSettings, address: str, gpu_idle_pct: float, idle_hours: float) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = s.sender
    msg["To"] = address
    msg["Subject"] = subject(row, s)
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = make_msgid(domain=(s.sender or "").rpartition("@")[2] or None)
    msg["X-Jobsight-Watch"] = _header(f"{row['cluster']}/{row['job_id_raw']}")
    msg.set_content(body(row, s, gpu_idle_pct, idle_hours))
    return msg


class Notifier:
    """Sends one cycle's notices: through an SMTP relay (`smtp` host:port) or as .eml files in
    `eml_dir`; `dry_run` lists them instead. `stop` is called between notices (it may raise)."""

    def __init__(self, db: Database, s: ReportSettings, smtp: Optional[str] = None, eml_dir: Optional[Path] = None,
                 dry_run: bool = False, log: Callable[[str], None] = print, stop: Callable[[], None] = lambda: None):
        self.db, self.s, self.smtp_server, self.eml_dir, self.dry_run = db, s, smtp, eml_dir, dry_run
        self.log, self.stop = log, stop
        self.gpu_idle_pct = notices.setting(db, "flags.gpu_idle_pct")
        self.idle_hours = notices.setting(db, "watch.idle_hours")

    def run(self, at: dt.datetime, out: Callable[[str], None] = print) -> Outcome:
        result = Outcome()
        todo = []
        for row in notices.due(self.db, at):
            what = f"job {_text(row['job_id'])} of {_text(row['user'])} ({row['gpus_idle']} GPU(s) idle " \
                   f"{_hours(row['idle_max_min'])})"
            addr = address_of(row["user"], self.s)
            if addr is None:
                result.no_address.append(what)
                (out if self.dry_run else self.log)(f"no notice for {what}: no usable address "
                                                    "(set [email] user_address or [email.addresses])")
            elif row["rate_limited"]:
                result.rate_limited.append(what)
                (out if self.dry_run else self.log)(
                    f"held back: {what}: {row['notices_24h']} notice(s) to {_text(row['user'])} in 24 h, "
                    f"limit {self._limit()}")
            elif self.dry_run:
                out(f"would send: {what} to {addr}")
                result.sent.append(f"{what} -> {addr}")
            else:
                todo.append((row, addr, what))
        if todo:
            self._send(todo, at, result)
        return result

    def _limit(self) -> int:
        return int(notices.setting(self.db, "watch.max_per_user_per_day"))

    def _send(self, todo: list, at: dt.datetime, result: Outcome) -> None:
        smtp = None
        if self.eml_dir is None:
            try:
                smtp = _smtp(self.smtp_server or self.s.smtp)
            except (OSError, smtplib.SMTPException) as exc:
                raise SendError(f"SMTP {self.smtp_server or self.s.smtp}: {exc}; {len(todo)} notice(s) wait for "
                                "the next cycle") from None
        try:
            for row, addr, what in todo:
                self.stop()
                nid = self._record(row, addr, at)
                try:
                    msg = message(row, self.s, addr, self.gpu_idle_pct, self.idle_hours)
                    if smtp is None:
                        outcome, detail = "written", str(self._write(msg, row, nid))
                    else:
                        smtp.send_message(msg, from_addr=self.s.sender, to_addrs=[addr])
                        outcome, detail = "sent", f"smtp {self.smtp_server or self.s.smtp}"
                except (OSError, smtplib.SMTPException, ValueError) as exc:
                    outcome, detail = "failed", f"{type(exc).__name__}: {exc}"
                self.db.execute("UPDATE watch_notice SET outcome = ?, detail = ? WHERE notice_id = ?",
                                [outcome, detail[:1000], nid])
                if outcome == "failed":
                    result.failed.append(what)
                    self.log(f"notice failed, tried again next cycle: {what} to {addr}: {detail}")
                else:
                    result.sent.append(f"{what} -> {addr}")
                    self.log(f"notice {outcome}: {what} to {addr}")
        finally:
            if smtp is not None:
                try:
                    smtp.quit()
                except (OSError, smtplib.SMTPException):
                    smtp.close()

    def _record(self, row: dict, addr: str, at: dt.datetime) -> int:
        """The attempt, committed before the message leaves."""
        nid = self.db.value("SELECT nextval('watch_notice_id_seq')")
        self.db.execute("INSERT INTO watch_notice (notice_id, cluster, job_id_raw, job_id, \"user\", address, sent_at, "
                        "outcome, gpus_idle, idle_min) VALUES (?, ?, ?, ?, ?, ?, ?, 'sending', ?, ?)",
                        [nid, row["cluster"], row["job_id_raw"], row["job_id"], row["user"], addr, at,
                         row["gpus_idle"], row["idle_max_min"]])
        return nid

    def _write(self, msg: EmailMessage, row: dict, nid: int) -> Path:
        """DIR/watch-<cluster>-<job>-<notice>.eml, whole or not at all (written aside, then renamed)."""
        self.eml_dir.mkdir(parents=True, exist_ok=True)
        stem = f"watch-{_FILE_CHARS.sub('_', str(row['cluster']))[:40]}-{_FILE_CHARS.sub('_', str(row['job_id_raw']))[:40]}"
        path = self.eml_dir / f"{stem}-{nid}.eml"
        tmp = self.eml_dir / f".{path.name}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(bytes(msg))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path


class SendError(RuntimeError):
    """The relay could not be reached: no notice was attempted."""


def _smtp(server: str) -> smtplib.SMTP:
    from jobsight.analytics.reports import mailer
    return mailer.connect_smtp(server)

"""E-mail: one multipart/alternative (text + HTML) message per recipient, as .eml files or over SMTP
to a small SMTP sink on 127.0.0.1 written here; no e-mail for a report without jobs."""
from __future__ import annotations

import contextlib
import email
import email.policy
import socket
import threading

import pytest
from test_report_values import XSS, build_db, run_cli

TOML = """
[budgets]
proj-a = 1000
[roles]
leads = { proj-a = ["alice"] }
[email]
from = "jobsight@hpc.example.org"
user_address = "{user}@example.org"
admins = ["ops@hpc.example.org"]
subject_prefix = "[hpc]"
[email.addresses]
bob = "robert@elsewhere.example"
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("mail")
    build_db(d / "m.duckdb")[0].close()
    (d / "jobsight.toml").write_text(TOML, encoding="utf-8")
    return d


def _args(d, *extra):
    return ["report", "--db", str(d / "m.duckdb"), "--config", str(d / "jobsight.toml"), "--week", "2026-W47",
            "--for", "all-users", "--for", "all-accounts", "--for", "admin", "--for", "user:dave", "--email", *extra]


def _parse(data: bytes):
    return email.message_from_bytes(data, policy=email.policy.default)


def _check_message(msg, to: str):
    assert msg["To"] == to and msg["From"] == "jobsight@hpc.example.org"
    assert msg.get_content_type() == "multipart/alternative"
    parts = {p.get_content_type(): p.get_content() for p in msg.iter_parts()}
    assert set(parts) == {"text/plain", "text/html"}
    return parts


def test_eml_files_one_per_recipient(setup, tmp_path):
    rc, _, err = run_cli(_args(setup, "--eml-dir", str(tmp_path / "eml")))
    assert rc == 0, err
    folder = tmp_path / "eml" / "2026-W47"
    # alice, bob, carol have jobs; dave has none -> no e-mail. proj-a has a lead (alice), proj-b none.
    assert sorted(p.name for p in folder.iterdir()) == [
        "account-proj-a.eml", "admin-cluster.eml", "user-alice.eml", "user-bob.eml", "user-carol.eml"]
    assert "no email  user-dave: no jobs in 2026-W47" in err
    assert "no email  account-proj-b: no leads" in err
    alice = _parse((folder / "user-alice.eml").read_bytes())
    parts = _check_message(alice, "alice@example.org")
    assert alice["Subject"] == "[hpc] Your week 2026-W47: 36.0 SBU burned, 22.0 wasted"
    assert XSS in parts["text/plain"]                                   # plain text: literal characters
    assert XSS not in parts["text/html"] and "&lt;script&gt;alert(1)&lt;/script&gt;" in parts["text/html"]
    assert "<script" not in parts["text/html"]                          # no JS in mail at all
    assert "36.0" in parts["text/html"] and "36.0" in parts["text/plain"]
    assert "bob" not in parts["text/plain"] and "carol" not in parts["text/plain"]
    _check_message(_parse((folder / "user-bob.eml").read_bytes()), "robert@elsewhere.example")
    _check_message(_parse((folder / "account-proj-a.eml").read_bytes()), "alice@example.org")
    admin = _parse((folder / "admin-cluster.eml").read_bytes())
    _check_message(admin, "ops@hpc.example.org")
    assert admin["Subject"] == "[hpc] Cluster: week 2026-W47: 107.0 SBU burned, 68.9 wasted"


def test_dry_run_lists_and_writes_nothing(setup, tmp_path):
    rc, out, err = run_cli(_args(setup, "--eml-dir", str(tmp_path / "eml"), "--dry-run"))
    assert rc == 0, err
    assert not (tmp_path / "eml").exists()
    lines = out.splitlines()
    assert "would send user-alice (text + HTML) to alice@example.org" in lines
    assert "would send user-bob (text + HTML) to robert@elsewhere.example" in lines
    assert "would send admin-cluster (text + HTML) to ops@hpc.example.org" in lines
    assert "no email  user-dave: no jobs in 2026-W47" in lines
    assert len(lines) == 7     # alice, bob, carol, proj-a, proj-b, admin, dave


class SmtpSink:
    """Just enough SMTP (RFC 5321) to accept messages: HELO/EHLO, MAIL, RCPT, DATA, RSET, QUIT, one
    session after another until stop(). ``refuse``: addresses refused at RCPT as a relay does;
    ``drop_after``: close the session, unanswered, at the MAIL after this many messages (once)."""

    def __init__(self, refuse=(), drop_after=None):
        self.messages: list[tuple[str, list[str], bytes]] = []
        self.refuse, self.drop_after, self.sessions = set(refuse), drop_after, 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def stop(self):
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)    # wakes the accept() of the serving thread
        self.sock.close()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:         # stop() closed the listening socket
                return
            self.sessions += 1
            with conn:
                self._session(conn.makefile("rwb"))

    def _session(self, f):
        def reply(text):
            f.write(text.encode() + b"\r\n")
            f.flush()
        reply("220 sink ESMTP")
        sender, rcpts = "", []
        while True:
            line = f.readline().decode().rstrip("\r\n")
            verb = line[:4].upper()
            if verb in ("EHLO", "HELO"):
                reply("250 sink")
            elif verb == "MAIL" and self.drop_after is not None and len(self.messages) == self.drop_after:
                self.drop_after = None
                return
            elif verb == "MAIL":
                sender, rcpts = line.split(":", 1)[1].strip(" <>"), []
                reply("250 OK")
            elif verb == "RCPT":
                rcpt = line.split(":", 1)[1].strip(" <>")
                if rcpt in self.refuse:
                    reply(f"550 5.1.1 <{rcpt}>: Recipient address rejected: no such user")
                else:
                    rcpts.append(rcpt)
                    reply("250 OK")
            elif verb == "DATA":
                reply("354 go ahead")
                data = []
                while (chunk := f.readline()) not in (b".\r\n", b""):
                    data.append(chunk[1:] if chunk.startswith(b"..") else chunk)
                self.messages.append((sender, rcpts, b"".join(data)))
                reply("250 queued")
            elif verb in ("RSET", "NOOP"):
                reply("250 OK")
            elif verb == "QUIT" or not line:
                reply("221 bye")
                return
            else:
                reply("502 not implemented")


def test_smtp_to_local_sink(setup):
    sink = SmtpSink()
    rc, _, err = run_cli(_args(setup, "--smtp", f"127.0.0.1:{sink.port}"))
    sink.stop()
    assert rc == 0, err
    assert "sent 5 e-mail(s)" in err and sink.sessions == 1
    assert sorted(r for _s, rs, _d in sink.messages for r in rs) == [
        "alice@example.org", "alice@example.org", "carol@example.org", "ops@hpc.example.org", "robert@elsewhere.example"]
    assert {s for s, _r, _d in sink.messages} == {"jobsight@hpc.example.org"}
    for _s, rcpts, data in sink.messages:
        _check_message(_parse(data), rcpts[0])


ALL_RECIPIENTS = ["alice@example.org", "alice@example.org", "carol@example.org", "ops@hpc.example.org",
                  "robert@elsewhere.example"]


def test_refused_recipient_costs_only_its_own_message(setup):
    # bob's address is the second of five messages: the three after it still go
    sink = SmtpSink(refuse={"robert@elsewhere.example"})
    rc, _, err = run_cli(_args(setup, "--smtp", f"127.0.0.1:{sink.port}"))
    sink.stop()
    assert rc == 1, err
    assert sorted(r for _s, rs, _d in sink.messages for r in rs) == [a for a in ALL_RECIPIENTS if a != "robert@elsewhere.example"]
    lines = err.splitlines()
    assert f"jobsight report: sent 4 e-mail(s) via 127.0.0.1:{sink.port}" in lines
    assert ("jobsight report: not sent: user-bob to robert@elsewhere.example: refused: 550 5.1.1 "
            "<robert@elsewhere.example>: Recipient address rejected: no such user") in lines
    assert lines[-1] == "jobsight report: 1 file(s) or e-mail(s) failed (listed above)"
    assert sink.sessions == 1


def test_dropped_session_is_opened_again(setup):
    sink = SmtpSink(drop_after=2)      # the relay hangs up at the third message
    rc, _, err = run_cli(_args(setup, "--smtp", f"127.0.0.1:{sink.port}"))
    sink.stop()
    assert rc == 0, err
    assert "sent 5 e-mail(s)" in err and "not sent" not in err
    assert sorted(r for _s, rs, _d in sink.messages for r in rs) == ALL_RECIPIENTS
    assert sink.sessions == 2


def test_smtp_refused_is_a_clear_error(setup):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                          # nothing listens there now
    rc, _, err = run_cli(_args(setup, "--smtp", f"127.0.0.1:{port}"))
    assert rc == 2 and f"SMTP 127.0.0.1:{port}" in err and "0 message(s) sent" in err


def test_email_without_sender_is_refused(tmp_path):
    build_db(tmp_path / "n.duckdb")[0].close()
    (tmp_path / "j.toml").write_text('[email]\nuser_address = "{user}@x.org"\n', encoding="utf-8")
    rc, _, err = run_cli(["report", "--db", str(tmp_path / "n.duckdb"), "--config", str(tmp_path / "j.toml"),
                          "--week", "2026-W47", "--for", "user:alice", "--email", "--eml-dir", str(tmp_path / "e"),
                          "--out", str(tmp_path / "r")])
    assert rc == 2 and "needs a sender" in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "e").exists()     # found before anything is written

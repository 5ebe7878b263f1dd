"""MUNGE authentication (`jobsight dashboard --munge`): `Authorization: MUNGE <credential>`, the
credential a client got from its host's munged (`munge -s "GET /api/v1/..."`), decoded here with
`unmunge` against this host's munged (the cluster's shared key).

A credential proves a uid; the passwd database names the user. Its payload must be the request
itself (method, one space, the path as sent with its query string), so a captured credential opens
nothing else. Each credential is decoded exactly once: munged remembers what it decoded and refuses
a replay (exit 17), so nothing here caches a success. Whatever is wrong (not a credential, expired,
rewound, replayed, restricted to another uid, bound to another request, unknown uid, munged down)
is a refusal, never a fall-back to another identity.
"""
from __future__ import annotations

import pwd
import re
import subprocess
from urllib.parse import quote

SCHEME = "munge"
# a credential as `munge` prints it: "MUNGE:" base64 ":" (munge 0.5); a bound of 8 KiB covers any
# payload a request line needs
CREDENTIAL_RE = re.compile(r"^MUNGE:[A-Za-z0-9+/=]{16,8192}:$")
TIMEOUT_S = 5.0
# unmunge's exit codes (munge_decode's errors) that name the credential's fault
REASONS = {8: "not a MUNGE credential", 15: "expired credential", 16: "rewound credential (clock skew)",
           17: "replayed credential", 18: "credential restricted to another user"}


class MungeDenied(Exception):
    """The credential does not authenticate this request; the message says why (for the log and
    the 401's body: nothing in it is secret)."""


def request_line(environ: dict) -> str:
    """The request as its credential must name it: method, space, path as sent (with the query)."""
    target = environ.get("REQUEST_URI") or environ.get("RAW_URI")
    if not target:      # a WSGI server that keeps no raw target: rebuild it (quoted as a client would)
        path = quote(environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""), safe="/:@!$&'()*+,;=-._~")
        query = environ.get("QUERY_STRING", "")
        target = path + ("?" + query if query else "")
    return f"{environ.get('REQUEST_METHOD', 'GET')} {target}"


def parse_unmunge(out: bytes) -> tuple[int, bytes]:
    """(uid, payload) from `unmunge --numeric`'s output: metadata lines, a blank line, the payload."""
    head, sep, payload = out.partition(b"\n\n")
    fields = dict(line.split(b":", 1) for line in head.splitlines() if b":" in line)
    try:
        status = int(fields[b"STATUS"].strip())
        uid = int(fields[b"UID"].strip())
        length = int(fields[b"LENGTH"].strip())
    except (KeyError, ValueError):
        raise MungeDenied("unmunge printed no status, uid or length") from None
    if status != 0:
        raise MungeDenied(REASONS.get(status, f"unmunge status {status}"))
    if not sep and length:
        raise MungeDenied("unmunge printed no payload")
    if len(payload) != length:
        raise MungeDenied("the payload's length differs from the credential's")
    return uid, payload


class MungeDecoder:
    """Decodes credentials with ``command`` (unmunge; the tests may point it elsewhere)."""

    def __init__(self, command: tuple[str, ...] = ("unmunge", "--numeric"), timeout: float = TIMEOUT_S):
        self.command, self.timeout = command, timeout

    def decode(self, credential: str) -> tuple[int, bytes]:
        if not CREDENTIAL_RE.match(credential):
            raise MungeDenied("not a MUNGE credential")
        try:
            done = subprocess.run(list(self.command), input=credential.encode("ascii") + b"\n",
                                  capture_output=True, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise MungeDenied("munged did not answer in time") from None
        except OSError as exc:
            raise MungeDenied(f"cannot run unmunge: {exc.strerror or exc}") from None
        if done.returncode != 0:
            raise MungeDenied(REASONS.get(done.returncode, f"unmunge failed (exit {done.returncode})"))
        return parse_unmunge(done.stdout)

    def user(self, header_value: str, environ: dict) -> str:
        """The user the `MUNGE <credential>` header proves for this request; MungeDenied otherwise."""
        uid, payload = self.decode(header_value.strip())
        # WSGI strings are bytes read as latin-1: encoding back gives the bytes the client sent
        if payload != request_line(environ).encode("latin-1", "replace"):
            raise MungeDenied("the credential is bound to another request")
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            raise MungeDenied(f"uid {uid} has no passwd entry") from None

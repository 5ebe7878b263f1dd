"""Who is asking: authentication modes and roles. Every request (page, asset, callback) passes
``Auth.check`` before Dash sees it; callbacks then read ``current_scope()``.

Modes
- none:   only on a loopback address; everyone is admin (a demo on your own machine).
- header: the user name comes from REMOTE_USER (set by the WSGI server) or the X-Forwarded-User
          header, trusted only on requests from a --trusted-proxy address (and, with
          --proxy-secret-file, carrying X-Jobsight-Proxy-Secret); anything else is refused.
- basic:  HTTP Basic against a users file of ``name:hash`` lines (hash from `--hash-password`).

The metrics (`/metrics`, dashboard/prometheus.py) are for admins and, with `[dashboard]
metrics_token_file`, for requests carrying that token as `Authorization: Bearer`: there a bearer
token is judged alone (the right one gets the metrics and nothing else, any other 401).

MUNGE (`--munge`, dashboard/munge_auth.py) comes on top of the mode: a request carrying
`Authorization: MUNGE <credential>` is judged by its credential alone (a good one: its uid's user; any
other: 401, never another identity). With `--auth none` and `--munge`, MUNGE is the only way in.

Roles (jobsight.toml):
    [roles]
    admins = ["root", "hpcadmin"]
    leads = { "proj-a" = ["alice"], "proj-b" = ["bob", "carol"] }
    sacctmgr_coordinators = true   # also make Slurm account coordinators leads of their accounts
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from jobsight.analytics.queries.scope import Scope

log = logging.getLogger("jobsight.dashboard")
MODES = ("none", "header", "basic")
USER_RE = re.compile(r"^[A-Za-z0-9_.@][A-Za-z0-9_.@$-]{0,63}$")
LOOPBACK_NAMES = {"localhost"}
# a bearer token: printable ASCII without blanks (an HTTP header's value), long enough not to guess
TOKEN_RE = re.compile(r"^[\x21-\x7e]{16,4096}$")


class AuthError(ValueError):
    """A configuration the server refuses to start with."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --- password hashes ------------------------------------------------------------------------
# Format: scrypt$<n>$<r>$<p>$<salt base64>$<hash base64>  or  pbkdf2_sha256$<iterations>$<salt>$<hash>

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt)}${b64(digest)}"


def verify_password(password: str, encoded: str) -> bool:
    try:
        parts = encoded.split("$")
        if parts[0] == "scrypt" and len(parts) == 6:
            n, r, p = (int(x) for x in parts[1:4])
            salt, want = base64.b64decode(parts[4]), base64.b64decode(parts[5])
            got = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=len(want),
                                 maxmem=256 * 1024 * 1024)
        elif parts[0] == "pbkdf2_sha256" and len(parts) == 4:
            salt, want = base64.b64decode(parts[2]), base64.b64decode(parts[3])
            got = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, int(parts[1]), dklen=len(want))
        else:
            return False
    except (ValueError, binascii.Error):
        return False
    return hmac.compare_digest(got, want)


def load_users_file(path: str | os.PathLike) -> dict[str, str]:
    """``name:hash`` per line; blank lines and lines starting with # are ignored."""
    p = Path(path)
    users: dict[str, str] = {}
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthError(f"{p}: cannot read users file: {exc.strerror}") from None
    for no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, encoded = line.partition(":")
        if not sep or not USER_RE.match(name) or not encoded.startswith(("scrypt$", "pbkdf2_sha256$")):
            raise AuthError(f"{p}:{no}: expected 'name:scrypt$...' or 'name:pbkdf2_sha256$...' "
                            "(create lines with `jobsight dashboard --hash-password NAME`)")
        if name in users:
            raise AuthError(f"{p}:{no}: user {name!r} appears twice")
        users[name] = encoded
    if not users:
        raise AuthError(f"{p}: no users in the users file")
    return users


# --- roles ----------------------------------------------------------------------------------

def parse_coordinators(text: str) -> dict[str, set[str]]:
    """`sacctmgr -nP show coordinator format=account,coordinator` -> {user: {accounts}}."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        account, sep, user = line.strip().partition("|")
        if sep and account and user:
            out.setdefault(user, set()).add(account)
    return out


def sacctmgr_coordinators(timeout: float = 10.0) -> dict[str, set[str]]:
    try:
        done = subprocess.run(["sacctmgr", "-nP", "show", "coordinator", "format=account,coordinator"],
                              capture_output=True, text=True, timeout=timeout, check=True)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_coordinators(done.stdout)


@dataclass
class Roles:
    """admins: user names; leads: user -> accounts they lead (config and, optionally, sacctmgr)."""
    admins: frozenset[str] = frozenset()
    leads: dict[str, frozenset[str]] = field(default_factory=dict)
    coordinators: Callable[[], dict[str, set[str]]] | None = None
    refresh_s: float = 600.0
    _coord: dict[str, set[str]] = field(default_factory=dict)
    _coord_at: float = float("-inf")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_config(cls, roles: dict[str, Any], where: str = "jobsight.toml") -> "Roles":
        known = {"admins", "leads", "sacctmgr_coordinators"}
        for key in roles:
            if key not in known:
                raise AuthError(f"{where}: unknown key roles.{key} (known: {', '.join(sorted(known))})")
        admins = roles.get("admins", [])
        if not isinstance(admins, list) or not all(isinstance(a, str) for a in admins):
            raise AuthError(f"{where}: roles.admins must be a list of user names")
        leads: dict[str, set[str]] = {}
        table = roles.get("leads", {})
        if not isinstance(table, dict):
            raise AuthError(f"{where}: roles.leads must be a table: account = [user names]")
        for account, users in table.items():
            if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
                raise AuthError(f"{where}: roles.leads.{account} must be a list of user names")
            for u in users:
                leads.setdefault(u, set()).add(account)
        coord = roles.get("sacctmgr_coordinators", False)
        if not isinstance(coord, bool):
            raise AuthError(f"{where}: roles.sacctmgr_coordinators must be true or false")
        return cls(admins=frozenset(admins), leads={u: frozenset(a) for u, a in leads.items()},
                   coordinators=sacctmgr_coordinators if coord else None)

    def _coordinator_accounts(self, user: str) -> set[str]:
        if self.coordinators is None:
            return set()
        with self._lock:
            if time.monotonic() - self._coord_at > self.refresh_s:
                self._coord = self.coordinators()
                self._coord_at = time.monotonic()
            return set(self._coord.get(user, ()))

    def scope_for(self, user: str) -> Scope:
        if user in self.admins:
            return Scope("admin", user)
        accounts = set(self.leads.get(user, ())) | self._coordinator_accounts(user)
        if accounts:
            return Scope("lead", user, tuple(sorted(accounts)))
        return Scope("user", user)


# --- per-request check ----------------------------------------------------------------------

@dataclass
class Denied:
    status: int
    text: str
    headers: dict[str, str] = field(default_factory=dict)


class Auth:
    """Decides, from a WSGI environ, who the request is from (or refuses it)."""

    def __init__(self, mode: str, roles: Roles, host: str = "127.0.0.1",
                 trusted_proxies: list[str] | None = None, users: dict[str, str] | None = None,
                 proxy_secret: str | None = None, metrics_token: str | None = None, munge=None):
        if mode not in MODES:
            raise AuthError(f"--auth must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode, self.roles = mode, roles
        self.trusted = [self._net(a) for a in (trusted_proxies or [])]
        self.munge = munge      # a munge_auth.MungeDecoder, or None: MUNGE credentials are refused
        if mode == "none" and munge is None and not is_loopback(host):
            raise AuthError(f"--auth none serves everyone as admin: only allowed on 127.0.0.1, not on {host}")
        if mode == "header":
            if not self.trusted:
                if not is_loopback(host):
                    raise AuthError(f"--auth header on {host} needs --trusted-proxy (the reverse proxy's address); "
                                    "without it anyone could send X-Forwarded-User")
                self.trusted = [self._net("127.0.0.1"), self._net("::1")]
        if proxy_secret is not None and mode != "header":
            raise AuthError("--proxy-secret-file is only used with --auth header")
        if proxy_secret is not None and len(proxy_secret) < 16:
            raise AuthError("the proxy secret must be at least 16 characters")
        self.proxy_secret = proxy_secret
        if metrics_token is not None and not TOKEN_RE.match(metrics_token):
            raise AuthError("the metrics token must be at least 16 printable characters without blanks "
                            "(e.g. `openssl rand -hex 32`)")
        self.metrics_token = metrics_token
        if mode == "basic" and not users:
            raise AuthError("--auth basic needs --users-file")
        self.users = users or {}
        self._ok_cache: dict[tuple[str, bytes], float] = {}
        self._cache_lock = threading.Lock()

    @staticmethod
    def _net(text: str):
        try:
            return ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            raise AuthError(f"--trusted-proxy: not an IP address or network: {text!r}") from None

    def _from_trusted(self, addr: str | None) -> bool:
        try:
            ip = ipaddress.ip_address((addr or "").strip("[]"))
        except ValueError:
            return False
        return any(ip in net for net in self.trusted)

    def _basic_user(self, header: str) -> str | None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        encoded = self.users.get(name)
        if not sep or encoded is None:
            return None
        # scrypt costs ~50 ms: remember good passwords (by digest) for a few minutes
        key = (name, hashlib.sha256(f"{name}:{password}".encode()).digest())
        now = time.monotonic()
        with self._cache_lock:
            if self._ok_cache.get(key, 0) > now:
                return name
        if not verify_password(password, encoded):
            return None
        with self._cache_lock:
            self._ok_cache[key] = now + 300
        return name

    def metrics_bearer(self, environ: dict) -> bool | None:
        """Whether the request's `Authorization: Bearer` is the metrics token; None when it carries
        no bearer token or none is configured (then the request is judged as any other)."""
        scheme, _, value = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        if self.metrics_token is None or scheme.lower() != "bearer":
            return None
        return hmac.compare_digest(value.strip().encode("utf-8", "replace"), self.metrics_token.encode())

    def _munge_user(self, value: str, environ: dict) -> str | Denied:
        from jobsight.dashboard.munge_auth import MungeDenied
        challenge = {"WWW-Authenticate": 'MUNGE realm="jobsight"'}
        if self.munge is None:
            return Denied(401, "MUNGE authentication is not enabled on this server (jobsight dashboard --munge)",
                          challenge)
        try:
            return self.munge.user(value, environ)
        except MungeDenied as exc:
            log.info("MUNGE credential refused: %s", exc)
            return Denied(401, f"Not authenticated: {exc}", challenge)

    def identify(self, environ: dict) -> str | Denied:
        scheme, _, value = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() == "munge":       # judged by the credential alone, whatever else is sent
            return self._munge_user(value, environ)
        if self.mode == "none":
            if self.munge is not None:      # --auth none --munge: MUNGE is the only way in
                return Denied(401, "Not authenticated: send a MUNGE credential",
                              {"WWW-Authenticate": 'MUNGE realm="jobsight"'})
            return "local"
        if self.mode == "header":
            if not self._from_trusted(environ.get("REMOTE_ADDR")):
                return Denied(403, "Forbidden: requests must come through the trusted proxy")
            # on a host where others can run processes, 127.0.0.1 alone does not prove the proxy
            if self.proxy_secret is not None and not hmac.compare_digest(
                    environ.get("HTTP_X_JOBSIGHT_PROXY_SECRET", "").encode(), self.proxy_secret.encode()):
                return Denied(403, "Forbidden: requests must come through the trusted proxy")
            user = environ.get("REMOTE_USER") or environ.get("HTTP_X_FORWARDED_USER") or ""
            user = user.strip()
            if not USER_RE.match(user):
                return Denied(403, "Forbidden: no valid user name from the proxy")
            return user
        user = self._basic_user(environ.get("HTTP_AUTHORIZATION", ""))
        if user is None:
            return Denied(401, "Login required", {"WWW-Authenticate": 'Basic realm="jobsight", charset="UTF-8"'})
        return user

    def scope(self, user: str) -> Scope:
        if self.mode == "none" and self.munge is None:
            return Scope("admin", user)
        return self.roles.scope_for(user)


def install(server, auth: Auth, token_paths: frozenset[str] = frozenset(), json_prefix: str | None = None) -> None:
    """Check every request of the Flask server before Dash handles it; the scope goes on flask.g.
    On ``token_paths`` (the metrics) a bearer token is checked against the metrics token first.
    Under ``json_prefix`` (the API) a refusal is JSON: {"error": message}."""
    import flask

    @server.before_request
    def _authenticate():
        if flask.request.path in token_paths:
            token_ok = auth.metrics_bearer(flask.request.environ)
            if token_ok is False:
                return flask.Response("Wrong token\n", status=401, mimetype="text/plain",
                                      headers={"WWW-Authenticate": 'Bearer realm="jobsight"'})
            if token_ok:
                flask.g.jobsight_metrics_token = True
                flask.g.jobsight_scope = Scope("user", "")      # the token opens the metrics, nothing else
                return None
        who = auth.identify(flask.request.environ)
        if isinstance(who, Denied):
            if json_prefix is not None and flask.request.path.startswith(json_prefix):
                return flask.Response(json.dumps({"error": who.text}) + "\n", status=who.status, headers=who.headers,
                                      mimetype="application/json")
            return flask.Response(who.text + "\n", status=who.status, headers=who.headers, mimetype="text/plain")
        flask.g.jobsight_scope = auth.scope(who)
        return None


def current_scope() -> Scope:
    """The scope of the request being served. No request context or no check: nothing visible."""
    import flask
    try:
        scope = flask.g.get("jobsight_scope")
    except RuntimeError:
        scope = None
    return scope if isinstance(scope, Scope) else Scope("user", "")


def metrics_token_accepted() -> bool:
    """Whether the request being served carried the metrics token (checked by ``install``)."""
    import flask
    try:
        return flask.g.get("jobsight_metrics_token") is True
    except RuntimeError:
        return False

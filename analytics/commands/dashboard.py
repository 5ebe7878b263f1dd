"""`jobsight dashboard`: serve the Dash dashboard on the newest read-only snapshot of a database.

    jobsight dashboard --db jobs.duckdb [--config jobsight.toml] [--host 127.0.0.1] [--port 8050]
                       [--auth none|header|basic] [--trusted-proxy ADDR] [--users-file FILE] [--debug]
    jobsight dashboard --hash-password NAME      # print a users-file line for --auth basic
    jobsight dashboard --db jobs.duckdb --publish   # publish the read-only snapshot now

Without --debug the app is served by waitress (a production WSGI server); --debug uses Dash's
development server with hot reload and Werkzeug's debugger, so it is refused on any --host but a
loopback one.

SIGINT stops it as SIGTERM does, also when it was started without a terminal: a shell starts a
background command (`jobsight dashboard ... &` in a script, a CI step) with SIGINT ignored, and
Python then never turns SIGINT into KeyboardInterrupt; the server claims SIGINT back (exit 130).
"""
from __future__ import annotations

import argparse
import errno
import getpass
import logging
import signal
import sys
from pathlib import Path

from jobsight.analytics.errors import UserError

DEFAULT_PORT = 8050
log = logging.getLogger("jobsight.dashboard")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="jobsight DuckDB file (the dashboard reads <db>.snapshot when ingest has published one)")
    p.add_argument("--config", help="jobsight.toml (default: $JOBSIGHT_CONFIG, then ./jobsight.toml); "
                                    "[roles] and [dashboard] are read from it")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--auth", choices=("none", "header", "basic"), default="none",
                   help="none: 127.0.0.1 only, everyone admin; header: user from REMOTE_USER / X-Forwarded-User "
                        "set by a trusted reverse proxy; basic: HTTP Basic against --users-file")
    p.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDR",
                   help="address or network of the reverse proxy whose user header is trusted (repeatable); "
                        "required for --auth header on a non-loopback --host")
    p.add_argument("--proxy-secret-file", metavar="FILE",
                   help="for --auth header: the proxy must also send this file's content in X-Jobsight-Proxy-Secret "
                        "(use it when other users can run processes on the dashboard's host)")
    p.add_argument("--users-file", help="for --auth basic: lines 'name:hash' (make them with --hash-password NAME)")
    p.add_argument("--munge", action="store_true",
                   help="also accept 'Authorization: MUNGE <credential>' (decoded with this host's munged; its "
                        "payload the request: 'GET /api/v1/...'), for `jobsight job --server` on the cluster's "
                        "hosts; with --auth none the only way in. Also [dashboard] munge = true")
    p.add_argument("--url-prefix", default="/", help="path the app is served under behind a proxy, e.g. /jobsight/")
    p.add_argument("--threads", type=int, default=8, help="waitress worker threads (default 8)")
    p.add_argument("--debug", action="store_true", help="Dash development server with debug tools (loopback --host only)")
    p.add_argument("--publish", action="store_true",
                   help="publish <db>.snapshot now and exit (ingest does this after each successful run)")
    p.add_argument("--hash-password", metavar="NAME",
                   help="read a password (twice, or once from stdin when not a terminal) and print 'NAME:hash' "
                        "for the --users-file, then exit")


def hash_password_line(name: str, stdin=sys.stdin) -> str:
    from jobsight.dashboard.auth import USER_RE, hash_password
    if not USER_RE.match(name):
        raise UserError(f"not a valid user name: {name!r}")
    if stdin.isatty():
        pw = getpass.getpass(f"password for {name}: ")
        if pw != getpass.getpass("again: "):
            raise UserError("the passwords differ")
    else:
        pw = stdin.readline().rstrip("\n")
    if len(pw) < 8:
        raise UserError("password too short (at least 8 characters)")
    return f"{name}:{hash_password(pw)}"


def build(args: argparse.Namespace):
    """The Dash app for the options (also used by the tests and the benchmark)."""
    from jobsight.analytics.config import ConfigError, load_config
    from jobsight.analytics.render import terminal_safe
    from jobsight.analytics.store.snapshot import SnapshotReader, publish, snapshot_path
    from jobsight.dashboard.app import create_app
    from jobsight.dashboard.auth import TOKEN_RE, Auth, AuthError, Roles, is_loopback, load_users_file

    if not args.db:
        raise UserError("--db is required")
    if args.debug and not is_loopback(args.host):
        # Werkzeug's debugger (/console) runs Python for whoever reaches it, before any --auth
        raise UserError(f"--debug runs code for anyone who can reach the server: only allowed on a loopback "
                        f"--host (127.0.0.1, ::1, localhost), not on {terminal_safe(args.host)}")
    try:
        cfg = load_config(args.config)
        roles = Roles.from_config(cfg.roles, str(cfg.path or "jobsight.toml"))
        users = load_users_file(args.users_file) if args.users_file else None
        if args.users_file and args.auth != "basic":
            raise AuthError("--users-file is only used with --auth basic")
        secret = None
        if args.proxy_secret_file:
            try:
                secret = Path(args.proxy_secret_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise AuthError(f"{args.proxy_secret_file}: cannot read the proxy secret: {exc.strerror}") from None
        token = None
        if cfg.metrics_token_file is not None:
            try:
                token = cfg.metrics_token_file.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise AuthError(f"{cfg.metrics_token_file}: cannot read the metrics token "
                                f"([dashboard] metrics_token_file): {getattr(exc, 'strerror', None) or exc}") from None
            if not TOKEN_RE.match(token):
                raise AuthError(f"{cfg.metrics_token_file}: the metrics token must be one line of at least 16 "
                                "printable characters without blanks (e.g. `openssl rand -hex 32`)")
        munge = None
        if args.munge or cfg.dashboard_munge:
            from jobsight.dashboard.munge_auth import MungeDecoder
            munge = MungeDecoder()
        auth = Auth(args.auth, roles, host=args.host, trusted_proxies=args.trusted_proxy, users=users,
                    proxy_secret=secret, metrics_token=token, munge=munge)
    except (ConfigError, AuthError) as exc:
        raise UserError(str(exc)) from None
    if Path(args.db).is_file() and not snapshot_path(args.db).exists():
        # Reading the live file would hold DuckDB's lock and block `jobsight ingest`: publish first.
        try:
            publish(args.db)
            log.info("published %s", snapshot_path(args.db))
        except UserError as exc:
            log.warning("no snapshot and none could be published (%s); reading %s itself, read-only, "
                        "which blocks writers until a snapshot appears", exc, args.db)
    reader = SnapshotReader(args.db)
    reader.tables()      # open now: a missing or outdated database is an error at start, not per request
    app = create_app(reader, auth, url_prefix=args.url_prefix, debug=args.debug)
    from jobsight.analytics.reports.settings import from_config
    from jobsight.dashboard.api import REPORT_SETTINGS
    app.server.config[REPORT_SETTINGS] = from_config(cfg)     # [report]: what the API's /report builds with
    return app


def run(args: argparse.Namespace) -> int:
    if args.hash_password:
        print(hash_password_line(args.hash_password))
        return 0
    if args.publish:
        from jobsight.analytics.store.snapshot import publish
        if not args.db:
            raise UserError("--db is required")
        print(f"published {publish(args.db)}")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    interrupted: list[int] = []

    def interrupt(signum, _frame):
        interrupted.append(signum)
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupt)     # see the module docstring
    _check_port(args.host, args.port)       # before publishing anything: a busy port is one line
    app = build(args)
    if args.debug:
        app.run(host=args.host, port=args.port, debug=True)
        return 0
    try:
        from waitress import create_server
    except ImportError:
        raise UserError("the production server needs waitress (pip install waitress), or use --debug locally") from None
    try:
        # trusted_proxy is left unset on purpose: the remote address must stay the proxy's own address
        server = create_server(app.server, host=args.host, port=args.port, threads=args.threads, ident="jobsight")
    except OSError as exc:
        raise UserError(_port_problem(args.host, args.port, exc)) from None
    print(f"jobsight dashboard: serving {args.db} on http://{args.host}:{args.port}{app.config.url_base_pathname} "
          f"(auth {args.auth})", file=sys.stderr)
    server.run()
    return 130 if interrupted else 0        # waitress stops on KeyboardInterrupt and returns


def _port_problem(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is already in use (another dashboard?): stop it, or choose another --port"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def _check_port(host: str, port: int) -> None:
    """The port is free (the development server would print a traceback, waitress its own lines)."""
    import socket
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise UserError(_port_problem(host, port, exc)) from None

#!/usr/bin/env python3
"""Place an order and hand its notification to tgnotify, from Python.

An application in any language writes its notifications into the outbox table
of its own SQLite database, in the transaction that saves its business data;
tgnotify's publisher does the rest. This script is such an application, with
nothing but Python 3.11's standard library, following docs/INTEGRATING.md:

    python3 examples/python/place_order.py --db shop.db --id A1 --chat-id 100 \
        [--email ann@example.com] [--phone +79991234567] [--route email,telegram]

It saves order A1 and the notification order:A1:accepted in one transaction
and prints the notification's key. With --cancel it cancels that
notification instead (the order was cancelled before it went out): one
UPDATE of the outbox row, as docs/INTEGRATING.md allows. Placing the same order again writes
nothing (the outbox's key is unique) and prints the same key. On a new
database it first creates the outbox from the published pkg/outbox/schema.sql
(--schema), and every connection runs pkg/outbox/connection.sql
(--connection-settings).

Exit status: 0 when the order is saved (now or before), 1 on a database
error, 2 on bad arguments.
"""

import argparse
import hashlib
import json
import pathlib
import re
import sqlite3
import sys
import time
from datetime import datetime, timezone

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SCHEMA_FILE = REPO / "pkg" / "outbox" / "schema.sql"
CONNECTION_FILE = REPO / "pkg" / "outbox" / "connection.sql"

# The outbox schema versions whose INSERT this script writes: version 2's,
# which versions 3 and 4 left as it was. --cancel needs version 4.
SCHEMA_VERSIONS = (2, 3, 4)
CANCEL_SCHEMA_VERSION = 4

# The application's own table, next to the outbox in the same file.
ORDERS_TABLE = """CREATE TABLE IF NOT EXISTS orders (
    id         TEXT    PRIMARY KEY,
    chat_id    INTEGER NOT NULL,
    email      TEXT    NOT NULL DEFAULT '',
    phone      TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
)"""

# One notification into the outbox; a key already present writes nothing
# (docs/INTEGRATING.md, "Writing a notification").
INSERT_OUTBOX = """INSERT INTO outbox (key, channel, recipient, recipient_token, payload, created_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO NOTHING"""

# Cancelling: the one UPDATE of an outbox row the contract allows.
CANCEL_OUTBOX = """UPDATE outbox SET cancelled_at = ?
WHERE key = ? AND cancelled_at IS NULL"""

CHANNELS = ("telegram", "email", "sms")  # the ones this script has addresses for, in the default route's order
KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")
PHONE_RE = re.compile(r"^\+[1-9][0-9]{7,14}$")
EMAIL_RE = re.compile(r"^[^\s@<>]+@[^\s@<>]+\.[^\s@<>.]+$")
MAX_CHAT_ID = 1 << 53


def statements(script):
    """Split an SQL script into statements, dropping comment-only text."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            stmt = "\n".join(l for l in buf.strip().splitlines() if not l.lstrip().startswith("--")).strip()
            if stmt:
                out.append(stmt)
            buf = ""
    if buf.strip() and any(not l.lstrip().startswith("--") for l in buf.strip().splitlines()):
        raise ValueError("incomplete SQL statement at the end of the script: " + buf.strip()[:60])
    return out


def connect(path, connection_sql):
    """Open the database in autocommit mode (every write transaction is an
    explicit BEGIN IMMEDIATE) and apply the outbox's connection settings."""
    conn = sqlite3.connect(path, isolation_level=None)
    for stmt in statements(connection_sql):
        conn.execute(stmt).fetchall()
    return conn


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""

    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")
        return False


def ensure_schema(conn, schema_sql):
    """Create the outbox (from schema.sql) and the orders table if missing,
    in one transaction, and check the outbox's schema version."""
    with Transaction(conn):
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outbox'").fetchone() is None:
            for stmt in statements(schema_sql):
                conn.execute(stmt)
        conn.execute(ORDERS_TABLE)
        (version,) = conn.execute("SELECT MAX(version) FROM outbox_schema").fetchone()
    if version not in SCHEMA_VERSIONS:
        raise SystemExit(f"place_order: the outbox is at schema version {version}; this script writes versions {SCHEMA_VERSIONS}")
    return version


def go_lower(s):
    """Lower-case like Go's strings.ToLower: Unicode's simple case mapping,
    one character at a time (for ASCII: A-Z to a-z)."""
    return "".join("i" if c == "\u0130" else c.lower() for c in s)


def hash_address(addr):
    """notify.HashAddress: the first 128 bits of SHA-256, in hex."""
    return hashlib.sha256(addr.encode("utf-8")).hexdigest()[:32]


def recipient_token(channel, chat_id, email, phone):
    """The recipient on channel as a subject token (notify.Recipient)."""
    if channel == "telegram":
        return str(chat_id)
    if channel == "email":
        return "e" + hash_address(go_lower(email))
    return "p" + hash_address(phone)


def rfc3339(ns):
    """Unix nanoseconds as RFC 3339 in UTC with nanoseconds."""
    seconds, frac = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def payload(key, chat_id, email, phone, route, text, created_ns):
    """The notification as payload.schema.json describes it: version 1 for a
    Telegram-only notification, version 2 otherwise."""
    v = 1 if route == ["telegram"] else 2
    p = {"v": v, "key": key}
    if v == 1:
        p.update(channel="telegram", chat_id=chat_id)
    else:
        p["route"] = route
        if chat_id:
            p["chat_id"] = chat_id
        if email:
            p["email"] = email
        if phone:
            p["phone"] = phone
    p.update(text=text, priority="transactional", created_at=rfc3339(created_ns))
    return p


def place_order(conn, order_id, chat_id, email, phone, route):
    """Save the order and its notification in one transaction. Returns the
    notification's key and whether anything was written."""
    key = f"order:{order_id}:accepted"
    created_ns = time.time_ns()
    body = json.dumps(payload(key, chat_id, email, phone, route, f"Order {order_id} accepted", created_ns),
                      ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with Transaction(conn):
        conn.execute("INSERT INTO orders (id, chat_id, email, phone, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                     (order_id, chat_id, email or "", phone or "", created_ns))
        cur = conn.execute(INSERT_OUTBOX, (key, route[0], chat_id, recipient_token(route[0], chat_id, email, phone), body, created_ns))
        inserted = cur.rowcount == 1
    return key, inserted


def cancel_order(conn, order_id):
    """Cancel the order's notification. Returns the key and whether the row
    was marked now (False: no such row, or cancelled before). A row not yet
    published is then never published; for a published one the publisher
    tells the workers, and notify.events.cancelled or cancel_too_late says
    whether it came in time."""
    key = f"order:{order_id}:accepted"
    with Transaction(conn):
        cur = conn.execute(CANCEL_OUTBOX, (time.time_ns(), key))
        return key, cur.rowcount == 1


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Save an order and its tgnotify notification in one SQLite transaction; print the notification's key.")
    ap.add_argument("--db", required=True, help="the application's SQLite database (created if missing)")
    ap.add_argument("--id", required=True, help="the order id; the notification's key is order:<id>:accepted")
    ap.add_argument("--chat-id", required=True, type=int, help="the customer's Telegram chat id")
    ap.add_argument("--email", default="", help="the customer's email address (adds the email channel)")
    ap.add_argument("--phone", default="", help="the customer's phone in E.164, +79991234567 (adds the SMS channel)")
    ap.add_argument("--route", default="", help="channels to try in order, e.g. email,telegram (default: telegram, email, sms, those with an address)")
    ap.add_argument("--cancel", action="store_true", help="cancel the order's notification instead of placing the order")
    ap.add_argument("--schema", default=str(SCHEMA_FILE), help="the published outbox schema (default: %(default)s)")
    ap.add_argument("--connection-settings", default=str(CONNECTION_FILE), help="the outbox's connection settings (default: %(default)s)")
    a = ap.parse_args(argv)
    if not KEY_RE.match(f"order:{a.id}:accepted"):
        ap.error("--id: the key order:<id>:accepted must be at most 255 visible ASCII characters")
    if a.chat_id == 0 or abs(a.chat_id) >= MAX_CHAT_ID:
        ap.error("--chat-id: not a Telegram chat id")
    if a.email and (len(a.email) > 254 or not EMAIL_RE.match(a.email)):
        ap.error("--email: not an address such as ann@example.com")
    if a.phone and not PHONE_RE.match(a.phone):
        ap.error("--phone: not an E.164 number such as +79991234567")
    have = {"telegram": True, "email": bool(a.email), "sms": bool(a.phone)}
    a.route = [c for c in a.route.split(",") if c] if a.route else [c for c in CHANNELS if have[c]]
    for c in a.route:
        if c not in CHANNELS or not have[c] or a.route.count(c) > 1:
            ap.error(f"--route: {c!r} is not a channel with an address here, or appears twice")
    return a


def main(argv):
    a = parse_args(argv)
    try:
        conn = connect(a.db, pathlib.Path(a.connection_settings).read_text())
        try:
            version = ensure_schema(conn, pathlib.Path(a.schema).read_text())
            if a.cancel:
                if version < CANCEL_SCHEMA_VERSION:
                    raise SystemExit(f"place_order: --cancel needs outbox schema version {CANCEL_SCHEMA_VERSION}; this one is at {version}")
                key, cancelled = cancel_order(conn, a.id)
            else:
                key, inserted = place_order(conn, a.id, a.chat_id, a.email, a.phone, a.route)
        finally:
            conn.close()
    except (sqlite3.Error, OSError) as e:
        print(f"place_order: {e}", file=sys.stderr)
        return 1
    print(key)
    if a.cancel:
        print(f"order {a.id}: " + ("notification cancelled" if cancelled else "no notification to cancel (none, or cancelled before)"), file=sys.stderr)
        return 0
    print(f"order {a.id}: " + ("saved; notification enqueued" if inserted else "already placed; nothing written"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

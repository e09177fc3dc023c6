"""The services' addresses: parsed from SOKOVAN_* values, written as URLs, checked for an answer."""

from __future__ import annotations

import urllib.parse

from scripts.devservices.checks import etcd_check, pg_check, redis_check, tcp_answers
from scripts.devservices.common import HOST


def parse_url_host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or HOST, parts.port or default_port


def parse_host_port(addr: str, default_port: int) -> tuple[str, int]:
    addr = addr.strip()
    if "://" in addr:
        return parse_url_host_port(addr, default_port)
    host, sep, port = addr.rpartition(":")
    if not sep:
        return addr or HOST, default_port
    return host.strip("[]") or HOST, int(port)


def url_for(name: str, host: str, port: int) -> str:
    if name == "postgres":
        return f"postgresql+asyncpg://postgres@{host}:{port}/postgres"
    if name == "redis":
        return f"redis://{host}:{port}/0"
    return f"{host}:{port}"


def check_value(name: str, value: str) -> str | None:
    """Check the address written in an env var / env file. None when it answers."""
    if name == "postgres":
        parts = urllib.parse.urlsplit(value)
        host, port = parts.hostname or HOST, parts.port or 5432
        if not parts.hostname:
            # A socket-only URL (e.g. ?host=/var/run/postgresql): we cannot probe it over TCP.
            return None
        return pg_check(
            host,
            port,
            urllib.parse.unquote(parts.username or "postgres"),
            parts.path.lstrip("/") or "postgres",
        )
    if name == "redis":
        parts = urllib.parse.urlsplit(value)
        if parts.scheme == "unix":
            return None
        host, port = parts.hostname or HOST, parts.port or 6379
        if parts.scheme == "rediss":
            return None if tcp_answers(host, port) else f"nothing listens on {host}:{port}"
        pw = urllib.parse.unquote(parts.password) if parts.password else None
        user = urllib.parse.unquote(parts.username) if parts.username and pw else None
        return redis_check(host, port, pw, user)
    host, port = parse_host_port(value, 2379)
    return etcd_check(host, port)

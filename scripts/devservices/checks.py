"""The probes: whether a PostgreSQL, Redis or etcd server, a container engine or a registry
answers at an address (None when it does, else the reason)."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import urllib.error
import urllib.parse
import urllib.request


def tcp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the server")
        buf += chunk
    return buf


def pg_check(host: str, port: int, user: str = "postgres", database: str = "postgres") -> str | None:
    """A pg_isready-like check speaking the PostgreSQL wire protocol.

    Returns None when the server accepts connections (it answers the startup message with an
    authentication request), else a reason.
    """
    params = b"".join(
        k.encode() + b"\0" + v.encode() + b"\0"
        for k, v in (("user", user), ("database", database), ("application_name", "sokovan-services"))
    )
    body = struct.pack("!i", 196608) + params + b"\0"  # protocol 3.0
    try:
        with socket.create_connection((host, port), timeout=3.0) as sock:
            sock.settimeout(3.0)
            sock.sendall(struct.pack("!i", len(body) + 4) + body)
            kind = _recv_exact(sock, 1)
            (length,) = struct.unpack("!i", _recv_exact(sock, 4))
            if length < 4 or length > 1 << 16:
                return "not a PostgreSQL server (bad message length)"
            payload = _recv_exact(sock, length - 4)
            if kind == b"R":
                with contextlib.suppress(OSError):
                    sock.sendall(b"X" + struct.pack("!i", 4))  # Terminate
                return None
            if kind == b"E":
                fields = dict(
                    (f[:1].decode(), f[1:].decode(errors="replace")) for f in payload.split(b"\0") if f
                )
                code = fields.get("C", "")
                msg = fields.get("M", "error")
                if code in ("28000", "28P01", "3D000"):
                    # The server runs and answers; the role/database/password is the caller's business.
                    return None
                return f"{msg} (SQLSTATE {code})"
            return f"not a PostgreSQL server (unexpected message {kind!r})"
    except (OSError, ConnectionError, struct.error) as exc:
        return str(exc) or type(exc).__name__


def redis_check(host: str, port: int, password: str | None = None, username: str | None = None) -> str | None:
    """PING over RESP. None when the server answers PONG (or asks for auth we were not given)."""
    try:
        with socket.create_connection((host, port), timeout=3.0) as sock:
            sock.settimeout(3.0)
            f = sock.makefile("rb")
            if password:
                args = ["AUTH", username, password] if username else ["AUTH", password]
                sock.sendall(_resp(args))
                line = f.readline()
                if not line.startswith(b"+OK"):
                    return f"AUTH refused: {line.decode(errors='replace').strip()}"
            sock.sendall(_resp(["PING"]))
            line = f.readline()
            if line.startswith(b"+PONG"):
                return None
            if line.startswith(b"-NOAUTH"):
                return None
            if line.startswith(b"-LOADING"):
                return "still loading its dataset"
            return f"not a Redis server (answered {line[:60]!r})"
    except OSError as exc:
        return str(exc) or type(exc).__name__


def _resp(args: list[str]) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def etcd_check(host: str, port: int) -> str | None:
    """GET /health (falling back to /version) on the client port. None when etcd says it is healthy."""
    try:
        with _NO_PROXY.open(f"http://{host}:{port}/health", timeout=3.0) as resp:
            data = json.loads(resp.read() or b"{}")
        if str(data.get("health")).lower() == "true":
            return None
        return f"etcd reports unhealthy: {data}"
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return "etcd reports unhealthy (503, no leader yet?)"
        reason = f"/health answered HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
    try:
        with _NO_PROXY.open(f"http://{host}:{port}/version", timeout=3.0) as resp:
            data = json.loads(resp.read() or b"{}")
        if "etcdserver" in data:
            return None
        return f"not an etcd server ({reason}; /version answered {data})"
    except (OSError, ValueError) as exc:
        return f"{reason}; /version: {exc}"


def engine_check(url: str, timeout: float = 5.0) -> str | None:
    """`GET /_ping` on an Engine API (`unix:///path` or `tcp://host:port`). None when it answers OK."""
    parts = urllib.parse.urlsplit(url)
    try:
        if parts.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(parts.path)
            except OSError:
                sock.close()
                raise
        elif parts.scheme in ("tcp", "http") and parts.hostname:
            sock = socket.create_connection((parts.hostname, parts.port or 2375), timeout=timeout)
        else:
            return f"{url} is neither unix:///path nor tcp://host:port"
        with sock:
            sock.settimeout(timeout)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: localhost\r\n\r\n")
            data = b""
            while len(data) < 1 << 16:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        return str(exc) or type(exc).__name__
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    if status.split()[1:2] == ["200"] and body.strip() == b"OK":
        return None
    return f"GET /_ping answered {status or 'nothing'!r}"


def registry_check(host: str, port: int) -> str | None:
    """`GET /v2/` on a registry. None when it answers (200, or 401 asking for a login)."""
    try:
        with _NO_PROXY.open(f"http://{host}:{port}/v2/", timeout=3.0):
            return None
    except urllib.error.HTTPError as exc:
        return None if exc.code == 401 else f"GET /v2/ answered HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return str(getattr(exc, "reason", None) or exc) or type(exc).__name__

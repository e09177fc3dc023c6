"""structlog set-up shared by the daemons: one line per event on stderr, JSON or console.

In `json` (the default when stderr is not a terminal) every line is one JSON object with
`timestamp`, `level`, `event`, `daemon` and the event's own keys; an exception is the field
`exception`, never loose lines. In `console` (the default on a terminal) lines read
`timestamp [level] event key=value ...`. Records of the standard library's `logging` (aiohttp,
asyncio, alembic, ...) go through the same processors and renderer (structlog's
ProcessorFormatter), so a JSON stream stays JSON, and so do warnings and an uncaught exception.

Whatever the format, `redact` runs last before rendering: keys that name credentials or a
session's environment are masked, and so are a DSN's password, a bearer token and the secrets
the daemon names in `setup_logging(secrets=...)`, wherever they appear in a value.
"""

from __future__ import annotations

import logging
import re
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any, Final, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

LOG_FORMAT_ENV: Final = "SOKOVAN_LOG_FORMAT"
FORMATS: Final = ("json", "console")
MASK: Final = "[REDACTED]"

# Keys whose value is masked whole, compared lower-cased; and parts that mask any key holding them
# (`cluster_secret`, `access_token`, `db_password`, ...).
SENSITIVE_KEYS: Final = frozenset(
    {"authorization", "environ", "environment", "env", "cookie", "set-cookie", "dsn", "passwd", "credentials"}
)
SENSITIVE_PARTS: Final = ("token", "secret", "password", "api_key", "apikey", "private_key")
_DSN_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<password>[^@/\s]+)(?=@)")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
_MAX_DEPTH = 6  # nested containers deeper than this are masked whole
_MIN_SECRET = 8  # a named secret shorter than this is not searched for in text (it would mask words)


def default_format(stream: TextIO | None = None) -> str:
    """`console` when `stream` (stderr) is a terminal, else `json`."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def sensitive_key(key: object) -> bool:
    name = str(key).lower()
    return name in SENSITIVE_KEYS or any(part in name for part in SENSITIVE_PARTS)


class Redactor:
    """The redaction processor; `secrets` are literal values masked wherever they appear."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = tuple(
            sorted({s for s in secrets if s and len(s) >= _MIN_SECRET}, key=len, reverse=True)
        )

    def __call__(self, logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
        return {
            key: (value if key == "_record" else self._value(key, value, 0))
            for key, value in event_dict.items()
        }

    def _value(self, key: object, value: Any, depth: int) -> Any:
        if sensitive_key(key) and value is not None:
            return MASK
        if depth > _MAX_DEPTH:
            return MASK
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self._value(k, v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self._value(None, v, depth + 1) for v in value]
        return value

    def text(self, text: str) -> str:
        """`text` with DSN passwords, bearer tokens and the named secrets masked."""
        if "://" in text:
            text = _DSN_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
        if "earer" in text:
            text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text


def add_context(context: Mapping[str, str]) -> Processor:
    """A processor adding `context` (e.g. `daemon`, `agent_id`) to each event that lacks the key."""

    def processor(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
        for key, value in context.items():
            event_dict.setdefault(key, value)
        return event_dict

    return processor


def _level_names(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    """`warn` (logging's old alias) and `exception` read as the levels they are."""
    level = event_dict.get("level")
    if level == "exception":
        event_dict["level"] = "error"
    elif level == "warn":
        event_dict["level"] = "warning"
    return event_dict


def _renderer(fmt: str) -> Processor:
    if fmt == "json":
        return structlog.processors.JSONRenderer(default=str)
    return structlog.dev.ConsoleRenderer(colors=False)


def processors(fmt: str, context: Mapping[str, str], secrets: Iterable[str] = ()) -> list[Processor]:
    """The chain every event goes through, structlog's own and the standard library's alike
    (the renderer excluded)."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _level_names,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_context(context),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        Redactor(secrets),
    ]


def setup_logging(
    daemon: str,
    fmt: str | None = None,
    level: int = logging.INFO,
    *,
    context: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> str:
    """Configure structlog and the standard library's logging for `daemon` (manager, agent,
    proxy, dev); `fmt` None picks `default_format()`. Returns the format in force."""
    fmt = fmt or default_format()
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (expected one of {', '.join(FORMATS)})")
    chain = processors(fmt, {"daemon": daemon, **(context or {})}, secrets)
    renderer = _renderer(fmt)
    structlog.configure(
        processors=[*chain, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *chain],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    logging.basicConfig(handlers=[handler], level=level, force=True)
    logging.captureWarnings(True)
    if fmt == "json":
        sys.excepthook = _log_uncaught
    return fmt


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: types.TracebackType | None) -> None:
    """An exception nothing caught, as one error event (not a traceback on stderr)."""
    structlog.get_logger("sokovan").error("uncaught_exception", exc_info=(kind, exc, tb))

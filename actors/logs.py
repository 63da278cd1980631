"""Structured logs: one JSON object a line, carrying cluster, member and view id.

A member actor calls ``setup(cluster, member, view_id_fn)`` once: every record of the
``raygroups`` loggers (the stack's included) in that worker process then goes to stderr
(which Ray collects into the worker's log file and echoes to the driver) as e.g.

    {"ts": 1795307917.1, "level": "INFO", "logger": "raygroups.member", "cluster": "orders",
     "member": "vm-0", "view_id": 4, "msg": "installed view ..."}

``view_id`` is the counter of the member's current view (0 before the first view).
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Callable, Optional

_handler: Optional[logging.Handler] = None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname,
               "logger": record.name, "cluster": getattr(record, "cluster", None),
               "member": getattr(record, "member", None),
               "view_id": getattr(record, "view_id", None), "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class ContextFilter(logging.Filter):
    """Stamps cluster, member and view id on every record that passes the handler."""

    def __init__(self, cluster: str, member: str, view_id: Callable[[], int]):
        super().__init__()
        self.cluster, self.member, self.view_id = cluster, member, view_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.cluster = getattr(record, "cluster", None) or self.cluster
        record.member = getattr(record, "member", None) or self.member
        try:
            record.view_id = self.view_id()
        except Exception:  # never let logging fail
            record.view_id = None
        return True


def setup(cluster: str, member: str, view_id: Callable[[], int],
          level: int = logging.INFO, stream=None) -> logging.Logger:
    """JSON lines for the ``raygroups`` loggers of this process; returns the member logger.
    Called again (a rejoin), it re-stamps the same handler."""
    global _handler
    root = logging.getLogger("raygroups")
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(stream or sys.stderr)
    _handler.setFormatter(JsonFormatter())
    _handler.addFilter(ContextFilter(cluster, member, view_id))
    root.addHandler(_handler)
    root.setLevel(level)
    root.propagate = False
    return logging.getLogger("raygroups.member")

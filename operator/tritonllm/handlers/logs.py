"""Structured logs: one JSON object per line, with the object's namespace and name when known."""

from __future__ import annotations

import json
import logging
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("namespace", "object"):
            value = getattr(record, key, None)
            if value and value != "-":
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


class _ObjectDefaults(logging.Filter):
    """Give every record the per-object fields, so the text format can always show them."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key in ("namespace", "object"):
            if not hasattr(record, key):
                setattr(record, key, "-")
        return True


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(namespace)s/%(object)s] %(message)s"


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(_ObjectDefaults())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    # kopf says "Handler 'pod_event' succeeded." for every watch event it hands us (6 in 10 of
    # the log's lines converging 1,000 deployments, and the CPU to format them): our handlers
    # only note the event, and what the reconcile then does is logged by us. Its warnings and
    # errors stay; --log-level DEBUG shows everything.
    debugging = logging.getLogger().getEffectiveLevel() <= logging.DEBUG
    logging.getLogger(KOPF_OBJECTS).setLevel(logging.NOTSET if debugging else logging.WARNING)


KOPF_OBJECTS = "kopf.objects"

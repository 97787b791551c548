"""Structured logs: one line per thing an operator wants to know, as text or as JSON lines.

Every line has an event name and fields; ``--log-format json`` prints them as one JSON object a
line, for a log pipeline, and text prints ``event key=value ...`` for a person. The member's
``Emit`` effects (membership, leader, state, migrations, lost partitions) each become one line.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import sys
import time
from typing import Any, TextIO

from shardgrid.core import events
from shardgrid.core.identity import MemberId

LOGGER_NAME = "shardgrid"


def _plain(value: Any) -> Any:
    if isinstance(value, MemberId):
        return f"{value.address}/{value.uuid[:8]}"
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


class _Formatter(logging.Formatter):
    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        """One line; a record with an exception (``member-failed``) also carries its traceback: a
        ``traceback`` field in JSON, the traceback's own lines after the line in text (found by an
        outside tester: the docs promised a traceback and neither format had one)."""
        fields: dict[str, Any] = getattr(record, "fields", {})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        trace = self.formatException(record.exc_info) if record.exc_info else ""
        if self.as_json:
            document = {"ts": stamp, "level": record.levelname.lower(), "event": record.getMessage()}
            document.update({key: _plain(value) for key, value in fields.items()})
            if trace:
                document["traceback"] = trace
            return json.dumps(document, default=str)
        text = " ".join(f"{key}={_text(_plain(value))}" for key, value in fields.items())
        line = f"{stamp} {record.levelname:<7} {record.getMessage()}" + (f" {text}" if text else "")
        return f"{line}\n{trace}" if trace else line


def _text(value: Any) -> str:
    shown = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(shown) if (" " in shown or not shown) else shown


def configure(log_format: str, stream: TextIO | None = None, level: int = logging.INFO) -> logging.Logger:
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_Formatter(log_format == "json"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return logger


def log(logger: logging.Logger, event: str, level: int = logging.INFO, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"fields": fields})


class BoundedLines:
    """At most one line per key every ``interval_s``: the lines held back in between are counted,
    and the count (``suppressed``) goes with the key's next line, or with a line of its own once the
    interval is over (``flush``), so nothing is hidden for longer than the interval. Keys are
    remembered at most ``max_keys`` at a time (the one whose last line is oldest goes first). (An
    outside tester reported a connection-refused line per join retry per peer; reproduced with a
    seed of another cluster name: two lines a second, and as many on the seed's side.)"""

    def __init__(self, logger: logging.Logger, interval_s: float, max_keys: int) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.max_keys = max_keys
        # key -> [when its last line was written, lines held back since, the last held back (event, level, fields)]
        self._keys: dict[Any, list[Any]] = {}

    def log(self, key: Any, now_s: float, event: str, level: int, **fields: Any) -> None:
        held = self._keys.get(key)
        if held is not None and now_s - held[0] < self.interval_s:
            held[1] += 1
            held[2] = (event, level, fields)
            return
        suppressed = held[1] if held is not None else 0
        self._keys.pop(key, None)
        self._keys[key] = [now_s, 0, None]
        while len(self._keys) > self.max_keys:
            del self._keys[next(iter(self._keys))]
        log(self.logger, event, level, **fields, suppressed=suppressed)

    def flush(self, now_s: float) -> None:
        """Write the count of each key whose interval is over with lines held back (a key that
        stayed quiet for a whole interval is forgotten)."""
        for key, (logged_s, suppressed, last) in list(self._keys.items()):
            if now_s - logged_s < self.interval_s:
                continue
            del self._keys[key]
            if suppressed:
                event, level, fields = last
                self._keys[key] = [now_s, 0, None]
                log(self.logger, event, level, **fields, suppressed=suppressed)


_EVENT_NAMES: dict[type, str] = {
    events.MemberAdded: "member-added",
    events.MemberRemoved: "member-removed",
    events.LeaderChanged: "leader-changed",
    events.ClusterStateChanged: "cluster-state-changed",
    events.MemberPromoted: "member-promoted",
    events.MigrationEvent: "migration",
    events.PartitionLost: "partition-lost",
    events.RemovedFromCluster: "removed-from-cluster",
    events.MemberRestored: "member-restored",
    events.MemberMoving: "member-moving",
    events.MemberMoved: "member-moved",
    events.MemberReaddressed: "member-readdressed",
    events.HotRestartIncomplete: "hot-restart-incomplete",
    events.PartitionsUnavailable: "partitions-unavailable",
    events.PartitionsAvailable: "partitions-available",
    events.MemberStopped: "member-stopped",
    events.ClusterNotFormed: "cluster-not-formed",
    events.LeaveRefused: "member-cannot-leave-now",
}


def log_member_event(logger: logging.Logger, event: Any) -> None:
    """One line for one of the member's ``Emit`` effects. A migration gets one line at info when it
    ends (its start is debug: two lines each would double a rebalance's log), a warning when it
    failed; a lost partition is a warning."""
    name = _EVENT_NAMES.get(type(event), type(event).__name__)
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    level = logging.INFO
    if isinstance(event, events.MigrationEvent):
        if event.phase is events.MigrationPhase.FAILED:
            level = logging.WARNING
        elif event.phase is events.MigrationPhase.STARTED:
            level = logging.DEBUG
    elif isinstance(
        event,
        events.PartitionLost | events.ClusterNotFormed | events.PartitionsUnavailable | events.HotRestartIncomplete,
    ):
        level = logging.WARNING
    elif isinstance(event, events.MemberRestored) and event.fsync != "always":
        level = logging.WARNING
        fields["note"] = (
            f"fsync={event.fsync}: writes acknowledged within the last sync interval before the stop may be lost; "
            "the partitions it owns start new lineages and their backups take its copies"
        )
    elif isinstance(event, events.LeaveRefused):
        level = logging.WARNING
        fields["note"] = "still serving; a second signal stops it at once, as a crash would"
    log(logger, name, level, **fields)

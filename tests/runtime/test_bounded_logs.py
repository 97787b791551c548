"""Refused connections are logged at a bounded rate.

Reported by an outside tester (one ``connection-refused`` line per join retry per peer), and
reproduced here: a member whose seed refused its connections (another cluster name) logged a line at
every join retry, and the seed as many for its side, a log that buries everything else while the
cluster is not formed. Each peer (and reason) now gets
one line every ``REPORT_EVERY_RETRIES`` join retries (10 s by default), with how many were not
logged; the metric still counts every one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from shardgrid.runtime import logs
from shardgrid.runtime.process import MemberProcess
from shardgrid.runtime.settings import load_settings

from .local_cluster import free_ports


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.getMessage(), dict(getattr(record, "fields", {}))))


def _logger(name: str) -> tuple[logging.Logger, Records]:
    logger = logging.getLogger(f"shardgrid.test.{name}")
    logger.handlers.clear()
    records = Records()
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger, records


def test_a_repeated_line_is_written_once_an_interval_with_the_count_of_the_others() -> None:
    logger, records = _logger("bounded")
    lines = logs.BoundedLines(logger, interval_s=10, max_keys=2)
    for tick in range(25):  # two a second for 12.5 s
        lines.log("a", tick / 2, "connection-refused", logging.WARNING, peer="a", reason=f"try {tick}")
        lines.flush(tick / 2)
    assert [(f["reason"], f["suppressed"]) for _, f in records.lines] == [("try 0", 0), ("try 20", 19)]
    lines.flush(30)  # the 4 held back since are written once the interval is over, then the key is quiet
    assert [(f["reason"], f["suppressed"]) for _, f in records.lines][2:] == [("try 24", 4)]
    lines.flush(45)
    assert len(records.lines) == 3
    for key in "bcd":  # at most max_keys remembered: the oldest is forgotten, never an error
        lines.log(key, 50, "connection-refused", logging.WARNING, peer=key)
    lines.log("b", 51, "connection-refused", logging.WARNING, peer="b")
    assert [f["peer"] for _, f in records.lines][3:] == ["b", "c", "d", "b"]


def _process(port: int, join: list[str], cluster: str, logger: logging.Logger) -> MemberProcess:
    flags: dict[str, Any] = {
        "port": port,
        "join": ",".join(join),
        "cluster_name": cluster,
        "initial_cluster_size": "2",
        "bootstrap_after_ms": "300",
        "join_retry_ms": "100",  # a line every 20 retries: every 2 s
    }
    return MemberProcess(load_settings(None, {}, flags), logger)


async def _two_clusters_refusing_each_other(seconds: float) -> list[tuple[Records, MemberProcess]]:
    ports = free_ports(2)
    addresses = [f"127.0.0.1:{port}" for port in ports]
    running = []
    for port, cluster in zip(ports, ("one", "other"), strict=True):
        logger, records = _logger(f"refused-{port}")
        process = _process(port, addresses, cluster, logger)
        running.append((records, process))
    tasks = []
    try:
        for _, process in running:
            await process.start()
            tasks.append(asyncio.create_task(process.run()))
        await asyncio.sleep(seconds)
    finally:
        for _, process in running:
            process._stopped.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return running


def test_a_seed_that_refuses_every_join_retry_is_logged_once_every_twenty_retries() -> None:
    """Two processes of different clusters that list each other, 100 ms join retries, for 4.5 s:
    before, about 40 lines each (one a retry, each side); now one at once, then one every 2 s."""
    for records, process in asyncio.run(_two_clusters_refusing_each_other(4.5)):
        refused = [fields for event, fields in records.lines if event == "connection-refused"]
        for direction in ("dialed", "accepted"):
            lines = [f for f in refused if f["direction"] == direction]
            assert 1 <= len(lines) <= 3, lines
            assert "is not this member's cluster" in lines[0]["reason"]
        assert sum(f["suppressed"] for f in refused) >= 20  # the others, counted
        counted = process.metrics.registry.get_sample_value("shardgrid_connections_refused_total")
        assert counted is not None
        assert counted >= len(refused) + sum(f["suppressed"] for f in refused)

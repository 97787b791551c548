"""A client process for the network-namespace tests: it runs in its own namespace (so a cut can
leave it with some members and not others) and takes commands on stdin, one JSON object a line,
answering each on stdout when it ends, with its id. Commands run at once, each on its own thread,
so a call may wait out a cut while the test heals it.

Commands: ``put`` (map, key, value), ``get`` (map, key), ``owner`` (map, key: the owner's
address in this client's table), ``reads`` (map, key, every_ms, for_ms: the values read, with
when, or the error's name). Times are wall-clock seconds: every namespace shares the clock.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from shardgrid.client import Client
from shardgrid.core.hashing import partition_id_of_serialized, serialize_key

MAX_READS = 2_000  # a bound on one ``reads`` command's answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", required=True)
    parser.add_argument("--operation-call-timeout-ms", type=int, default=120_000)
    parser.add_argument("--attempt-timeout-ms", type=int, default=10_000)
    args = parser.parse_args()
    lock = threading.Lock()

    def answer(message: dict[str, Any]) -> None:
        with lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    client = Client(
        args.members.split(","),
        operation_call_timeout_ms=args.operation_call_timeout_ms,
        attempt_timeout_ms=args.attempt_timeout_ms,
    )
    answer({"id": 0, "ok": True, "ready": True})

    def run(command: dict[str, Any]) -> None:
        started = time.time()
        try:
            result = execute(client, command)
            answer({"id": command["id"], "ok": True, "result": result, "start": started, "end": time.time()})
        except Exception as error:  # the test decides what an error means
            answer(
                {
                    "id": command["id"],
                    "ok": False,
                    "error": type(error).__name__,
                    "message": str(error),
                    "start": started,
                    "end": time.time(),
                }
            )

    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        threading.Thread(target=run, args=(command,), daemon=True).start()
    client.close()


def execute(client: Client, command: dict[str, Any]) -> Any:
    op = command["op"]
    data = client.get_map(command["map"])
    if op == "put":
        data.set(command["key"], command["value"])
        return None
    if op == "get":
        return data.get(command["key"])
    if op == "owner":
        data.get(command["key"])  # the table is known
        table = client.async_client.table
        return table.owners[partition_id_of_serialized(serialize_key(command["key"]), table.partition_count)]
    if op == "reads":
        reads: list[list[Any]] = []
        deadline = time.time() + command["for_ms"] / 1000
        while time.time() < deadline and len(reads) < MAX_READS:
            at = time.time()
            try:
                reads.append([at, data.get(command["key"]), None])
            except Exception as error:
                reads.append([at, None, type(error).__name__])
            time.sleep(command["every_ms"] / 1000)
        return reads
    raise ValueError(f"unknown command {op!r}")


if __name__ == "__main__":
    main()

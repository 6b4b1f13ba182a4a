# SPDX-License-Identifier: Apache-2.0
"""What one member's read of a quiet group costs, by group size, on a real etcd and Redis.

Run from the repository root, on the test servers::

    SERVERS=etcd,redis tools/with-test-servers.sh .venv/bin/python -m benchmarks.membership_bench \\
        [--members 10,100,300] [--reads 200] [--backends etcd,redis] [--json FILE]

Every member (agent or conductor) reads its group every ``watch_interval``.
Side by side, for a group of M members that does not change:

* ``full read`` -- what every read was before (and still is on the file
  backend): tooz's ``get_members_with_capabilities``, every member's entry
  decoded;
* ``signature`` -- what a read of a quiet group is now
  (:func:`hashring.group_read.group_signature`): on etcd one key, on Redis
  one digest the server computes, whatever M.

It prints the CPU time and the wall time per read (mean of ``--reads``).
The members are joined without heartbeats and a lease longer than the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
    from tooz import coordination

from benchmarks import argtypes
from hashring.group_read import group_signature

__all__ = ["main", "measure"]

#: What an agent's group entry carries (the size of each decoded entry).
_CAPABILITIES = {
    "ring_version": 1,
    "weight": 1.0,
    "groups": [],
    "serving": True,
    "rpc_api": "1.19",
}


def measure(url: str, members: int, reads: int) -> dict[str, dict[str, float]]:
    """ms of CPU and of wall time per read of a group of *members*, each way."""
    group = f"bench-{uuid.uuid4().hex[:8]}".encode()
    joined: list[Any] = []
    try:
        for index in range(members):
            member = coordination.get_coordinator(url, f"agent-{index:04d}".encode())
            member.start(start_heart=False)
            if index == 0:
                member.create_group(group).get()
            member.join_group(group, {**_CAPABILITIES, "incarnation": uuid.uuid4().hex}).get()
            joined.append(member)
        reader = joined[0]
        ways: dict[str, Callable[[], object]] = {
            "full read": lambda: reader.get_members_with_capabilities(group).get(),
            "signature": lambda: group_signature(reader, group),
        }
        return {name: _time(read, reads) for name, read in ways.items()}
    finally:
        for member in joined:
            member.leave_group(group).get()
            member.stop()


def _time(read: Callable[[], object], reads: int) -> dict[str, float]:
    read()  # connections made, caches warm
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(reads):
        read()
    return {
        "cpu_ms": (time.process_time() - cpu) / reads * 1000,
        "wall_ms": (time.perf_counter() - wall) / reads * 1000,
    }


#: The backends whose group a signature reads (the file backend has none).
_BACKENDS = ("etcd", "redis")


def _backends(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    unknown = sorted(set(names) - set(_BACKENDS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"backends of {', '.join(_BACKENDS)}, got {text!r}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=argtypes.int_list(1), default=[10, 100, 300])
    parser.add_argument("--reads", type=argtypes.at_least(1), default=200)
    parser.add_argument(
        "--backends",
        type=_backends,
        default=list(_BACKENDS),
        help="of etcd, redis (comma-separated)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for backend in args.backends:
        variable = f"RINGFLEET_TEST_{backend.upper()}_URL"
        server = os.environ.get(variable)
        if not server:
            parser.error(f"{variable} is unset: run through tools/with-test-servers.sh")
        url = f"{server}?membership_timeout=600"
        results[backend] = {str(m): measure(url, m, args.reads) for m in args.members}
    header = f"{'full read: CPU / wall ms':>26}  {'signature: CPU / wall ms':>26}"
    print(f"{'backend':>8}  {'members':>8}  {header}")
    for backend, by_size in results.items():
        for m, ways in by_size.items():
            full, sig = ways["full read"], ways["signature"]
            print(
                f"{backend:>8}  {m:>8}  {full['cpu_ms']:>12.2f} / {full['wall_ms']:>8.2f}  "
                f"{sig['cpu_ms']:>12.2f} / {sig['wall_ms']:>8.2f}"
            )
    print(f"load average: {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

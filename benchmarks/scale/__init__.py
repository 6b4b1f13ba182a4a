# SPDX-License-Identifier: Apache-2.0
"""Scale benchmark (issues 13, 39): 100k nodes, 10-100 agents, 1-2 conductors.

Run from the repository root, with the test servers::

    SERVERS=etcd,rabbit,postgres tools/with-test-servers.sh \\
        .venv/bin/python -m benchmarks.scale_bench --nodes 100000 --agents 10
    ... -m benchmarks.scale_bench --nodes 100000 --agents 10,30 --conductors 2 --json s.json
    ... -m benchmarks.scale_bench --nodes 20000 --agents 10,50 --agents-per-process 10

The fleet is the functional tests' (:class:`tests.functional.fleet_harness.Fleet`:
real processes on the PostgreSQL, RabbitMQ and etcd of
``tools/with-test-servers.sh``, ``membership_timeout`` 3 s, watch interval
0.2 s), with the agents' reconcile and report intervals at their defaults,
the simulated driver's deploy time 0 and DEBUG logging off.  The benchmark
creates a private database on that server and drops it afterwards.  For
each agent count it runs, in order:

``import``
    ``ringfleet node import`` of a CSV of ``--nodes`` rows (the console
    script as an operator runs it: up to 100,000 rows in one call, checked
    and written there), one conductor up, no agent yet.
``cold``
    The agents started together; the time from their start (and from the
    moment the last one serves) until every unpinned node is owned by its
    ring owner: :meth:`hashring.membership.MembershipView.ring` of the node's
    group over the live agents, read from etcd by a watcher in this process
    (as a conductor reads it), not merely "owned by someone".  Claims
    granted, refused and releases are counted from the conductors' log lines
    ``Agent X claimed A of B nodes (R refused ...)`` and ``Agent X released D nodes``.
``join``
    One more agent (always a process of its own); the time until the ring
    of M+1 agents is converged, the nodes that moved against the ideal
    N/(M+1), and the nodes that moved between two agents that were there
    before (should be 0).
``kill``
    kill -9 of that agent; the time until every node is owned by a live
    agent again (and until the ring is converged again).
``cold``, ``join`` and ``kill`` also count what the step cost, from its
start until the ring converged: the conductors' CPU seconds (user +
system, psutil), the bytes through RabbitMQ (``rabbitmqctl
list_connections recv_oct send_oct``, both directions, every connection;
one opened meanwhile, such as a new agent's, counts whole) and the RPC
calls the conductors served (their ``ringfleet_rpc_server_duration_seconds``
counts, scraped from their metrics endpoints); for ``join`` and ``kill``
next to the rate of the same fleet quiet just before (its heartbeats and
state reports go on meanwhile; a cold start has no fleet before it).  And
the node rows the agents read for their inventories (full and incremental
reads): each agent's ``ringfleet_agent_inventory_rows_total{host=...}``,
scraped from its own metrics endpoint at convergence -- for the cold start
the sum over the agents and the most one agent read, for a join the
joiner's and the growth of the others' (sum, most), for a kill the
growth of the survivors'.  Reads after the convergence are not counted:
an agent re-reads the rows changed by the claims at its next pass, which
may come after the ring converged (then the others' growth is 0).
``--agents-per-process K``
    The cold start's agents run K to a Python process
    (``benchmarks/multi_agent.py``: K
    :class:`compute_agent.service.AgentService` objects, each on its own
    ``cfg.ConfigOpts`` with its own host, RPC transport, etcd lease,
    metrics registry and metrics port, run in native threads of one
    interpreter; the process log is shared, each line names its host).  50
    or 100 agent processes on 2 cores each import the whole package and
    cost minutes of CPU before the first serves; K to a process measures
    the fleet rather than the interpreters' start.  Per-agent numbers stay
    apart: rows read come from each agent's own counter, and an agent's
    RSS share is its process's RSS / K (reported apart from the RSS of the
    agents in processes of their own, with the process's whole RSS).
    The joined agent, and a killed one, are always processes of their own
    (without ``join`` the kill's victim, the first agent, runs alone), so
    kill -9 is the real thing.  K = 1 (the default): one process per agent
    (``compute_agent.cmd.agent``), as before.
``builds``
    ``--builds`` instances requested in requests of ``--batch`` by 4 client
    threads, until the last is ACTIVE (:func:`benchmarks.e2e_bench.throughput`);
    with ``--conductors 2`` first with both, then with one (the other stopped).
``node list``
    ``ringfleet node list -f value -c UUID`` of the whole fleet (``--no-node-list``: skipped).
``--waves N``
    After the steps, N times: one more agent joins, ``--builds`` builds, kill
    -9 of that agent; the conductor's RSS after each wave (now, not the
    largest seen), and whether it keeps growing over the second half.
``resources``
    Conductor CPU seconds (user + system, whole run and the cold start) and
    the largest RSS seen of any conductor and any agent (from /proc, sampled
    while polling; with ``--agents-per-process K`` the agents of a K-agent
    process apart: their share, the process's RSS / K, and its RSS).

Goals (besides the times above: cold start <= 15 s, join <= TTL + 5 s,
kill -9 <= TTL + 2 s, agent RSS <= 150 MB, conductor <= 1 GB).  TTL is
``--ttl``: the functional tests' 3 s by default; production's 10 s
(docs/operations.rst) with ``--ttl 10 --watch-interval 1`` for agent counts
whose heartbeats two cores cannot keep within 1.5 s:

* rows read by all agents in a cold start <= 1.2 x the nodes;
* a join's broker bytes <= 2 x the joiner's share, where the share is
  N/(M+1) nodes x the *bytes per row read* of the same fleet's cold start:
  its broker bytes divided by the rows its agents read.  That counts the
  cold start's claims, state reports and heartbeats against the rows, so it
  is an upper bound of an inventory entry's own bytes (generous to the
  join), measured on the same broker and code rather than assumed;
* with two or more agent counts in one invocation, each larger count
  against the smallest (:mod:`benchmarks.scale.scaling`, which also prints
  them as one table with the ratios): the cold start's conductor CPU
  seconds and broker bytes, the conductor CPU per quiet minute
  (``--quiet``) and the conductor's RSS <= 1.3 x; and the conductor CPU
  per *whole* cold start, counted on until the agents' first state
  reports are done and the conductors idle (what the cold start causes
  after the convergence, such as the node index reading the last claims,
  falls in the plain count or not as the timing goes: at 100 agents the
  ring converges seconds before those reports, with no time to be idle).

``--quiet SECONDS``
    After the cold start, once its aftermath is over (10 s, then until no
    state report came for two samples: each agent's first report carries
    every node it owns), the converged fleet left alone that long: the
    conductor CPU, broker bytes, rows read and RPC calls served (by
    method: calls and seconds served) per minute.

``etcd``
    The requests the fleet made to etcd over each step and per quiet
    minute, per etcd client (each agent and conductor has one; one agent
    per process: per process), counted by etcd itself
    (:mod:`benchmarks.scale.etcd`).  The agents' CPU (psutil, per process)
    and the test servers' (PostgreSQL, etcd) are measured per step too.

The projection (:mod:`benchmarks.scale.projection`): each wall time (cold
start, join, kill -9) projected to one agent per host from the CPU each
role spent on the step and the protocol's fixed waits, as a range, next
to the measured time (``--conductor-cores N``: the conductor's host).

``--code DIR`` runs the conductors and agents from another checkout of the
project (same virtualenv), e.g. the commit before the claim-storm fix::

    git worktree add --detach /tmp/prefix 4733a63^
    ... -m benchmarks.scale_bench --steps import,cold --code /tmp/prefix

A benchmark reports, tests check: each goal prints PASS or MISS, and the
exit status is 0 either way.  See ``benchmarks/README.rst``.

The modules: :mod:`~benchmarks.scale.observe` (the ring, the logs, the
metrics pages), :mod:`~benchmarks.scale.procs` (processes, CPU and RSS),
:mod:`~benchmarks.scale.traffic` (the message bus),
:mod:`~benchmarks.scale.etcd` (etcd requests), :mod:`~benchmarks.scale.run`
(the steps on one fleet), :mod:`~benchmarks.scale.runner` (a fleet per
agent count, the report), :mod:`~benchmarks.scale.goals`,
:mod:`~benchmarks.scale.scaling`, :mod:`~benchmarks.scale.projection`,
:mod:`~benchmarks.scale.report` and :mod:`~benchmarks.scale.cli`.
"""

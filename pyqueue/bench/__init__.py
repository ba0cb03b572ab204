"""``pyqueue bench`` (also ``python -m pyqueue.bench``, ``make bench``): how
fast jobq is, as ratios to the floor of a plain Postgres queue measured in
the same run on the same server.

Nothing outside this package imports it except ``pyqueue bench``, and only
when that subcommand runs: ``import pyqueue`` and a running worker never
load it (``tests/test_layout.py`` checks).

- ``suite``: the command's options and one whole run, section by section;
- ``config``: the sizes of a full run and of ``--quick``;
- ``harness``: driver loops in separate processes, started together, counted;
- ``sql_loops``: the floor, jobq through SQL alone, the naive ``FOR UPDATE`` queue;
- ``worker_loops``: ``pyqueue.Worker`` processes, pickup latency, the suite's soak (``--soak``);
- ``drains``, ``throughput``: the drain rows; producers and scaling;
- ``profiling``: each statement timed alone, and the plan ``jobq.claim`` uses;
- ``report``, ``chart``: the printed tables and JSON; the PNG chart (matplotlib).
- ``dashboard``: ``python -m pyqueue.bench.dashboard``, the dashboard's pages rendered over
  1M archived and 100k live jobs.

Programs of their own, which ``make bench`` runs after the suite (issue 16):

- ``pooler``: 1,000 asyncio consumers through a real PgBouncer (``pgbouncer``:
  the runner, shared with the tests) against 16 direct connections, and idle load;
- ``prune``: pruning 1,000,000 expired jobs by partition drop against 0.6.0's DELETE;
- ``queue_partitions``: ``jobq._job`` partitioned by queue against as installed;
- ``cold_start`` (the systems in ``cold_systems``, the printout in ``cold_report``): a burst
  into a fresh, never-analyzed database, drained by workers started at once, against the floor
  and a pgmq-style loop (issue 24);
- ``server_cpu``: the server's CPU per job of a cold drain (backends read from ``/proc``), jobq's
  SQL loop and ``pyqueue.Worker`` against a pgmq-style loop, with an A/B against an older install
  script (issue 24);
- ``soak``: 10 minutes at 70 % of capacity, sampled every 10 s, with a verdict and a chart.

And, after ``queue_partitions``, issue 24's:

- ``python_side``: what pyqueue's Python adds to jobq's SQL: one Worker and one AsyncWorker
  process against a bare claim + complete_many loop, W=16 Worker processes against W=4,
  ``enqueue_many`` and ``enqueue`` against a raw INSERT from Python.
"""

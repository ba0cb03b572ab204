---------------------------------------------------------------------------
-- 8. views
---------------------------------------------------------------------------

CREATE VIEW jobq.stats AS
    -- Per queue: jobs ready now, scheduled for later, running, dead, the
    -- age of the oldest ready job (how far behind the workers are; NULL when
    -- none is ready), whether the queue is paused, the totals of completed
    -- jobs, failed attempts and dead-lettered jobs (from the counters:
    -- history is never scanned), jobs waiting for their parents, and
    -- whether some of the counts are estimates. The live and dead counts
    -- (jobq._queue_counts) cost the same with a backlog of a million: exact
    -- up to 10,000 jobs of a queue, estimated above (estimated is true);
    -- running and oldest_ready_age are always exact.
    WITH counts AS (
        SELECT c.* FROM jobq._queue_counts() AS c
    ), totals AS (
        SELECT c.queue, sum(c.completed)::bigint AS completed, sum(c.failed)::bigint AS failed,
               sum(c.dead)::bigint AS dead
        FROM jobq._counter AS c
        GROUP BY c.queue
    ), names AS (
        SELECT c.queue FROM counts AS c
        UNION SELECT q.queue FROM jobq._queue AS q
        UNION SELECT t.queue FROM totals AS t
    )
    SELECT n.queue,
           coalesce(c.ready, 0) AS ready,
           coalesce(c.scheduled, 0) AS scheduled,
           coalesce(c.running, 0) AS running,
           coalesce(c.dead, 0) AS dead,
           c.oldest_ready_age,
           coalesce(q.paused, false) AS paused,
           coalesce(t.completed, 0) AS completed_total,
           coalesce(t.failed, 0) AS failed_total,
           coalesce(t.dead, 0) AS dead_total,
           coalesce(c.waiting, 0) AS waiting,
           coalesce(c.estimated, false) AS estimated
    FROM names AS n
    LEFT JOIN counts AS c ON c.queue = n.queue
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue
    LEFT JOIN totals AS t ON t.queue = n.queue;
COMMENT ON VIEW jobq.stats IS
    'Per queue: ready, scheduled, running and dead job counts, the age of the oldest ready job, paused, completed/failed/dead totals, waiting jobs, and whether counts are estimates (over 10,000 jobs).';

CREATE VIEW jobq.jobs AS
    -- Every job jobq still knows, live or finished, with one status column:
    -- waiting (for parents), ready, scheduled, running, completed, dead or
    -- cancelled. heartbeat_at: the last heartbeat of a running job's lease
    -- (NULL before its first, and for jobs not running). result: what a
    -- completed job reported; cancelled_by: the ancestor whose failure
    -- cancelled it; progress: what a live job last reported (jobq.progress),
    -- NULL once it finished. Paged newest first by id within a queue, both halves
    -- read an index (the primary key, and (queue, id) of the archive).
    -- Jobs of a queue with read grants (jobq.grant_queue) show only to the
    -- roles that hold one and jobq_admin; while no read grant exists, one
    -- look at an empty table decides for every row. The filter stands
    -- outside the UNION ALL: a subquery in a half's WHERE would keep the
    -- planner from merging the halves' index scans.
    SELECT u.*
    FROM (
        SELECT j.id, j.queue, j.payload,
               CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END AS status,
               j.priority::integer AS priority, j.run_at, j.attempts, j.max_attempts, j.job_key, j.worker,
               j.lease_expires_at, j.last_error, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
               j.group_key, j.timeout, j.heartbeat_at, NULL::jsonb AS result, NULL::bigint AS cancelled_by,
               j.progress, j.meta
        FROM jobq._job AS j
        UNION ALL
        SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
               a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
               a.group_key, a.timeout, NULL::timestamptz, a.result, a.cancelled_by, NULL::jsonb, a.meta
        FROM jobq._job_archive AS a
    ) AS u
    WHERE (SELECT NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read'))
       OR coalesce((SELECT bool_or(p.held) FROM jobq._read_pattern AS p
                    WHERE u.queue LIKE p.queue_like), true);
COMMENT ON VIEW jobq.jobs IS 'All live and finished jobs with a single status column (for operators).';

CREATE VIEW jobq.queues AS
    -- Effective settings of every configured queue and every queue with jobs:
    -- its overrides over jobq._queue_defaults, as jobq._settings() applies
    -- them (no function call, so a reader needs no EXECUTE on a private one).
    -- No limit shows as 0 (what configure_queue takes to remove one);
    -- updated_at is NULL for a queue never configured. The names of queues
    -- with jobs come from skip scans (one index probe per name), not from
    -- reading every job.
    SELECT n.queue,
           coalesce(q.max_attempts, d.max_attempts) AS max_attempts,
           coalesce(q.backoff_base, d.backoff_base) AS backoff_base,
           coalesce(q.backoff_cap, d.backoff_cap) AS backoff_cap,
           coalesce(q.backoff_jitter, d.backoff_jitter) AS backoff_jitter,
           coalesce(q.lease, d.lease) AS lease,
           coalesce(q.retention, d.retention) AS retention,
           q.dead_retention,
           coalesce(q.max_payload_bytes, d.max_payload_bytes) AS max_payload_bytes,
           q.updated_at,
           coalesce(q.concurrency, 0) AS concurrency,
           coalesce(q.rate_limit, 0) AS rate_limit,
           CASE WHEN q.rate_limit IS NOT NULL THEN coalesce(q.rate_interval, d.rate_interval) END AS rate_interval,
           coalesce(q.paused, d.paused) AS paused,
           q.timeout,
           coalesce(q.result_retention, d.result_retention) AS result_retention,
           coalesce(q.fair, false) AS fair,
           q.fair_weights,
           coalesce(q.per_key_concurrency, 0) AS per_key_concurrency
    FROM (SELECT c.queue FROM jobq._queue AS c
          UNION SELECT l.queue FROM jobq._live_queues AS l
          UNION SELECT d.queue FROM jobq._dead_queues AS d) AS n
    CROSS JOIN jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue;
COMMENT ON VIEW jobq.queues IS 'Effective settings (overrides over defaults) of every known queue; 0 concurrency, rate_limit or per_key_concurrency: no limit.';

CREATE VIEW jobq.fair_keys AS
    -- The fair queues' keys at a glance: per queue, its 100 busiest fair
    -- keys (running + ready, then key order) with their ready (due now),
    -- scheduled and running jobs and the age of their oldest ready job;
    -- fair_key NULL for the jobs enqueued without one, rank 1 the busiest.
    -- Reads every live job of the fair queues (jobq._job_fair_idx and the
    -- parked running ones): for dashboards and operators, not hot paths.
    SELECT k.queue, nullif(k.fair_key, '') COLLATE "default" AS fair_key, k.ready, k.scheduled, k.running, k.oldest_ready_age, k.rank
    FROM (SELECT j.queue, j.fair_key,
                 count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS ready,
                 count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > now()) AS scheduled,
                 count(*) FILTER (WHERE j.status = 'running') AS running,
                 now() - min(j.run_at) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS oldest_ready_age,
                 row_number() OVER (PARTITION BY j.queue
                                    ORDER BY count(*) FILTER (WHERE j.status = 'running' OR
                                                              (j.status = 'ready' AND j.run_at <= now())) DESC,
                                             j.fair_key) AS rank
          FROM jobq._job AS j
          JOIN jobq._queue AS q ON q.queue = j.queue AND q.fair
          WHERE j.fair_key IS NOT NULL
          GROUP BY j.queue, j.fair_key) AS k
    WHERE k.rank <= 100;
COMMENT ON VIEW jobq.fair_keys IS
    'Per fair queue, its 100 busiest fair keys: ready, scheduled and running jobs, oldest ready age, rank (NULL key: jobs without one).';

CREATE VIEW jobq.schedules AS
    -- Periodic jobs registered with jobq.every(): who runs them (pg_cron
    -- or the workers), the next tick the workers will run, the last run.
    SELECT p.name, p.schedule, p.queue, p.payload, p.priority::integer AS priority, p.max_attempts,
           p.created_at, p.updated_at, p.runner, p.next_run_at, p.last_run_at
    FROM jobq._periodic AS p;
COMMENT ON VIEW jobq.schedules IS 'Periodic jobs registered with jobq.every(), run by pg_cron or by the workers (jobq.run_schedules).';

CREATE VIEW jobq.workers AS
    -- One row per worker name holding running jobs now: its queues, how many
    -- jobs, when the oldest started, its last heartbeat (NULL when none of
    -- its leases was heart-beaten yet) and the next of its leases to expire.
    -- Claims without a worker name show as one row with worker NULL. The
    -- running jobs come from jobq._running, which never reads the ready or
    -- waiting ones.
    SELECT r.worker,
           array_agg(DISTINCT r.queue ORDER BY r.queue) AS queues,
           count(*) AS jobs,
           min(r.started_at) AS oldest_started_at,
           max(r.heartbeat_at) AS last_heartbeat_at,
           min(r.lease_expires_at) AS next_lease_expires_at
    FROM jobq._running() AS r
    GROUP BY r.worker;
COMMENT ON VIEW jobq.workers IS 'The workers holding running jobs now: queues, job count, oldest start, last heartbeat, next lease expiry.';

CREATE VIEW jobq.throughput AS
    -- Per queue and minute over the last hour (the current minute and the 59
    -- before it): jobs completed, failed attempts and jobs dead-lettered,
    -- from the counters (history is never scanned). A minute counts what
    -- finished in transactions that started in it; minutes with nothing are
    -- absent.
    SELECT c.queue, c.bucket AS minute,
           sum(c.completed)::bigint AS completed, sum(c.failed)::bigint AS failed, sum(c.dead)::bigint AS dead
    FROM jobq._counter AS c
    WHERE c.bucket >= date_trunc('minute', now()) - interval '59 minutes'
    GROUP BY c.queue, c.bucket;
COMMENT ON VIEW jobq.throughput IS 'Completed jobs, failed attempts and dead-lettered jobs per queue and minute over the last hour.';

CREATE VIEW jobq.job_errors AS
    -- The error of every failed attempt of the jobs jobq still knows (the
    -- last 25 per job; jobq.jobs.last_error is the latest): from jobq.fail,
    -- jobq.fail_held, and leases that expired (jobq.reap). attempt starts
    -- again at 1 after a retry of a dead job: failed_at orders them. Only
    -- of the jobs jobq.jobs shows the reader (per-queue read grants).
    SELECT e.job_id, e.attempt, e.error, e.failed_at, e.worker
    FROM jobq._job_error AS e
    WHERE (SELECT NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read'))
       OR EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = e.job_id);
COMMENT ON VIEW jobq.job_errors IS 'The error of each failed attempt of a job (the last 25 per job), with its attempt, time and worker.';

CREATE VIEW jobq.job_dependencies AS
    -- The dependency edges of the jobs jobq still knows: child_id waits for
    -- (or waited for) parent_id. An edge lives as long as its child; the
    -- parent may be gone already (completed without history, or pruned).
    -- Only the edges of children jobq.jobs shows the reader (per-queue read
    -- grants).
    SELECT d.child_id, d.parent_id
    FROM jobq._job_dep AS d
    WHERE (SELECT NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read'))
       OR EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = d.child_id);
COMMENT ON VIEW jobq.job_dependencies IS 'Job dependencies: child_id depends on parent_id (depends_on, or a batch callback''s members).';

CREATE VIEW jobq.archive_partitions AS
    -- The partitions of the history of finished jobs: one per UTC day of
    -- expiry (prune_after, from_time inclusive to to_time exclusive; from_time
    -- NULL for one holding everything before to_time), and the default
    -- partition (jobq._job_archive_kept, both bounds NULL) for jobs kept until
    -- retried and those expiring on a day without a partition yet. rows is
    -- the planner's estimate (NULL before the partition was first vacuumed
    -- or analyzed), never a count; expired: jobq.prune drops it whole.
    SELECT c.relname::text COLLATE "default" AS partition,
           CASE WHEN b.bound LIKE 'FOR VALUES FROM (''%'
                THEN substring(b.bound FROM 'FROM \(''([^'']*)''\)')::timestamptz END AS from_time,
           CASE WHEN b.bound LIKE '% TO (''%'
                THEN substring(b.bound FROM 'TO \(''([^'']*)''\)')::timestamptz END AS to_time,
           CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END AS rows,
           pg_catalog.pg_total_relation_size(c.oid) AS bytes,
           coalesce(substring(b.bound FROM 'TO \(''([^'']*)''\)')::timestamptz <= now(), false) AS expired
    FROM pg_catalog.pg_inherits AS i
    JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (SELECT pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS bound) AS b
    WHERE i.inhparent = 'jobq._job_archive'::pg_catalog.regclass
    ORDER BY 3 NULLS LAST;
COMMENT ON VIEW jobq.archive_partitions IS
    'The partitions of the finished jobs'' history (one per UTC day of expiry, and the default one), with size and estimated rows.';

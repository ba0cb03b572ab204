---------------------------------------------------------------------------
-- 8. views
---------------------------------------------------------------------------

CREATE VIEW jobq.stats AS
    -- Per queue: jobs ready now, scheduled for later, running, dead, the
    -- age of the oldest ready job (how far behind the workers are; NULL when
    -- none is ready), whether
    -- the queue is paused, and the totals of completed jobs, failed attempts
    -- and dead-lettered jobs (from the counters: history is never scanned).
    WITH live AS (
        SELECT j.queue,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS ready,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > now()) AS scheduled,
               count(*) FILTER (WHERE j.status = 'running') AS running,
               now() - min(j.run_at) FILTER (WHERE j.status = 'ready' AND j.run_at <= now()) AS oldest_ready_age
        FROM jobq._job AS j
        GROUP BY j.queue
    ), dead AS (
        SELECT a.queue, count(*) AS dead
        FROM jobq._job_archive AS a
        WHERE a.status = 'dead'
        GROUP BY a.queue
    ), totals AS (
        SELECT c.queue, sum(c.completed)::bigint AS completed, sum(c.failed)::bigint AS failed,
               sum(c.dead)::bigint AS dead
        FROM jobq._counter AS c
        GROUP BY c.queue
    ), names AS (
        SELECT l.queue FROM live AS l
        UNION SELECT d.queue FROM dead AS d
        UNION SELECT q.queue FROM jobq._queue AS q
        UNION SELECT t.queue FROM totals AS t
    )
    SELECT n.queue,
           coalesce(l.ready, 0) AS ready,
           coalesce(l.scheduled, 0) AS scheduled,
           coalesce(l.running, 0) AS running,
           coalesce(d.dead, 0) AS dead,
           l.oldest_ready_age,
           coalesce(q.paused, false) AS paused,
           coalesce(t.completed, 0) AS completed_total,
           coalesce(t.failed, 0) AS failed_total,
           coalesce(t.dead, 0) AS dead_total
    FROM names AS n
    LEFT JOIN live AS l ON l.queue = n.queue
    LEFT JOIN dead AS d ON d.queue = n.queue
    LEFT JOIN jobq._queue AS q ON q.queue = n.queue
    LEFT JOIN totals AS t ON t.queue = n.queue;
COMMENT ON VIEW jobq.stats IS
    'Per queue: ready, scheduled, running and dead job counts, the age of the oldest ready job, paused, and completed/failed/dead totals.';

CREATE VIEW jobq.jobs AS
    -- Every job jobq still knows, live or finished, with one status column:
    -- ready, scheduled, running, completed, dead or cancelled.
    SELECT j.id, j.queue, j.payload,
           CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END AS status,
           j.priority::integer AS priority, j.run_at, j.attempts, j.max_attempts, j.job_key, j.worker,
           j.lease_expires_at, j.last_error, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
           j.group_key, j.timeout
    FROM jobq._job AS j
    UNION ALL
    SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
           a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
           a.group_key, a.timeout
    FROM jobq._job_archive AS a;
COMMENT ON VIEW jobq.jobs IS 'All live and finished jobs with a single status column (for operators).';

CREATE VIEW jobq.queues AS
    -- Effective settings of every configured queue and every queue with jobs.
    -- No limit shows as 0 (what configure_queue takes to remove one);
    -- updated_at is NULL for a queue never configured.
    SELECT s.queue, s.max_attempts, s.backoff_base, s.backoff_cap, s.backoff_jitter, s.lease, s.retention,
           s.dead_retention, s.max_payload_bytes, nullif(s.updated_at, '-infinity') AS updated_at,
           coalesce(s.concurrency, 0) AS concurrency, coalesce(s.rate_limit, 0) AS rate_limit, s.rate_interval,
           s.paused, s.timeout
    FROM (SELECT q.queue FROM jobq._queue AS q
          UNION SELECT j.queue FROM jobq._job AS j
          UNION SELECT a.queue FROM jobq._job_archive AS a WHERE a.status = 'dead') AS n,
         LATERAL jobq._settings(n.queue) AS s;
COMMENT ON VIEW jobq.queues IS 'Effective settings (overrides over defaults) of every known queue; 0 concurrency or rate_limit: no limit.';

CREATE VIEW jobq.schedules AS
    -- Periodic jobs registered with jobq.every(): who runs them (pg_cron
    -- or the workers), the next tick the workers will run, the last run.
    SELECT p.name, p.schedule, p.queue, p.payload, p.priority::integer AS priority, p.max_attempts,
           p.created_at, p.updated_at, p.runner, p.next_run_at, p.last_run_at
    FROM jobq._periodic AS p;
COMMENT ON VIEW jobq.schedules IS 'Periodic jobs registered with jobq.every(), run by pg_cron or by the workers (jobq.run_schedules).';

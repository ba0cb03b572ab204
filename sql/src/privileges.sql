---------------------------------------------------------------------------
-- 9. privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON SCHEMA jobq FROM PUBLIC;

GRANT USAGE ON SCHEMA jobq TO jobq_producer, jobq_worker, jobq_admin, jobq_viewer;

GRANT EXECUTE ON FUNCTION
    jobq.version(),
    jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, jsonb, text, text),
    jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, jsonb[], text[], text)
TO jobq_producer;

GRANT EXECUTE ON FUNCTION
    jobq.version(),
    jobq.claim(text, bigint, text, interval),
    jobq.claim(text[], bigint, text, interval),
    jobq.take(text, bigint),
    jobq.hold(text, bigint),
    jobq.complete_held(bigint[], jsonb[]),
    jobq.fail_held(bigint, text, timestamptz),
    jobq.complete(bigint, uuid, jsonb),
    jobq.complete_many(bigint[], uuid[], jsonb[]),
    jobq.fail(bigint, text, uuid, timestamptz),
    jobq.heartbeat(bigint, uuid, interval),
    jobq.progress(bigint, uuid, jsonb),
    jobq.release(bigint, uuid),
    jobq.snooze(bigint, uuid, timestamptz),
    jobq.reap(integer),
    jobq.next_run_at(text[]),
    jobq.run_schedules()
TO jobq_worker;

-- jobq_admin is a member of jobq_producer and jobq_worker, plus:
GRANT EXECUTE ON FUNCTION
    jobq.retry(bigint),
    jobq.retry_dead(text),
    jobq.run_now(bigint),
    jobq.cancel(bigint),
    jobq.cancel_jobs(text, text, jsonb, jsonb),
    jobq.discard_dead(text, interval),
    jobq.prune(integer),
    jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval, boolean, jsonb, integer),
    jobq.reset_queue(text),
    jobq.pause(text),
    jobq.resume(text),
    jobq.every(text, text, text, jsonb, integer, integer, text),
    jobq.unschedule(text),
    jobq.enqueue_periodic(text),
    jobq._periodic_save(text, text, text, jsonb, integer, integer, text),
    jobq._periodic_delete(text),
    jobq._pg_cron_installed(),
    jobq.schedule_maintenance(text, text),
    jobq.unschedule_maintenance(),
    jobq._require_pg_cron()
TO jobq_admin;
GRANT SELECT ON jobq.stats, jobq.jobs, jobq.queues, jobq.schedules TO jobq_admin;
-- jobq.every and jobq.unschedule remove the caller's own pg_cron job (since 0.9.0).
GRANT EXECUTE ON FUNCTION jobq._cron_unschedule_own(text) TO jobq_admin;
-- Workers prune where pg_cron does not, as they reap (since 0.4.0; granted
-- after jobq_admin's, as upgraded databases have it).
GRANT EXECUTE ON FUNCTION jobq.prune(integer) TO jobq_worker;
-- A view runs its functions with the reader's privileges: jobq.queues calls
-- jobq._settings(), which only reads jobq._queue (readable by jobq_admin).
GRANT EXECUTE ON FUNCTION jobq._settings(text) TO jobq_admin;
GRANT SELECT ON jobq._job, jobq._job_archive, jobq._queue, jobq._migration, jobq._periodic, jobq._rate_start,
    jobq._counter, jobq._key_done, jobq._taken, jobq._at_commit TO jobq_admin;

-- jobq_viewer (since 0.5.0) reads the public views and the metrics, and
-- nothing else: no private table, no other function. jobq_admin is a member.
GRANT EXECUTE ON FUNCTION jobq.version(), jobq.metrics() TO jobq_viewer;
GRANT SELECT ON jobq.stats, jobq.jobs, jobq.queues, jobq.schedules, jobq.workers, jobq.throughput,
    jobq.job_errors TO jobq_viewer;
GRANT EXECUTE ON FUNCTION jobq.metrics() TO jobq_worker, jobq_admin;
GRANT SELECT ON jobq._job_error, jobq._queue_defaults TO jobq_admin;

-- Workflows (since 0.6.0): producers enqueue batch callbacks; producers and
-- workers read a job's state, its result and its parents' results, and
-- watch a job to be notified when it finishes.
GRANT EXECUTE ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer, jsonb) TO jobq_producer;
GRANT EXECUTE ON FUNCTION jobq.status(bigint), jobq.result(bigint), jobq.parent_results(bigint), jobq.watch(bigint)
    TO jobq_producer, jobq_worker;
GRANT SELECT ON jobq.job_dependencies TO jobq_viewer;
GRANT SELECT ON jobq.job_dependencies, jobq._job_dep, jobq._job_wait TO jobq_admin;

-- The archive's partitions (since 0.7.0): viewers and admins see them.
GRANT SELECT ON jobq.archive_partitions TO jobq_viewer;

-- Counts and running jobs without reading the backlog (since 0.9.0): jobq.stats
-- and jobq.workers read them through these two, which pin their plans (a view
-- cannot), so their readers may call them.
GRANT EXECUTE ON FUNCTION jobq._queue_counts(), jobq._running() TO jobq_viewer;
GRANT SELECT ON jobq._live_queues, jobq._dead_queues TO jobq_admin;
-- Per-queue privileges (since 0.9.0): admins grant and revoke them; viewers
-- (and so admins) see them.
GRANT EXECUTE ON FUNCTION jobq.grant_queue(name, text, text), jobq.revoke_queue(name, text, text) TO jobq_admin;
GRANT SELECT ON jobq.queue_grants TO jobq_viewer;
-- Fair queues (since 0.12.0): their keys at a glance.
GRANT SELECT ON jobq.fair_keys TO jobq_viewer;
GRANT SELECT ON jobq._queue_grant, jobq._read_pattern TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

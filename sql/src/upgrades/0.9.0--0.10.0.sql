-- jobq 0.9.0 → 0.10.0: smaller SQL functions, the same behaviour (issue 30, item 4). One line per change:
--   jobq._finish split by idea: new jobq._finish_lean (completed jobs, nothing kept: deleted) and
--     jobq._finish_kept (the general case: archived or deleted with their side rows); _finish chooses and
--     does what follows (jobs named in this transaction, NOTIFY of watched jobs, dependents, wake-ups)
--   new jobq._retry_or_bury: the failed attempt that jobq.fail and jobq.fail_held both record (counter,
--     error history, dead letter or a retry after backoff with jitter), written once
--   jobq._claim: which jobs and leases first (plain path or jobq._pick), then one lease UPDATE (it was two)
--   jobq._pick: each queue's budget (pause, concurrency, rate limit) in new jobq._queue_slots, its candidates
--     (one statement) in new jobq._pick_candidates, the re-check of serial-group heads after the row locks in
--     new jobq._group_heads_only
--   jobq.enqueue_many: its full argument checks (the slow path) in new jobq._check_enqueue_many_args, its
--     job keys' in new jobq._check_job_keys
--   calls name their arguments (p_held => true, not a bare true): jobq._finish's callers (complete,
--     complete_many, complete_held, take, cancel, cancel_jobs, reap, _settle, _finish_dependents) and _claim
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.10.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.9.0 is installed.

DO $path$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    ELSE
        PERFORM pg_catalog.set_config('jobq.caller_search_path', pg_catalog.current_setting('search_path'), false);
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
    END IF;
END
$path$;

DO $guard$
BEGIN
    IF jobq.version() <> '0.9.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.9.0 to 0.10.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.10.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

-- @replace-function jobq.version()

-- the end of a job: split by idea, named arguments
-- @function jobq._finish_lean(bigint[], uuid[], boolean)
-- @function jobq._finish_kept(bigint[], uuid[], text, text, boolean, jsonb[], bigint)
-- @replace-function jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint)
-- @replace-function jobq.complete(bigint, uuid, jsonb)
-- @replace-function jobq.complete_many(bigint[], uuid[], jsonb[])
-- @replace-function jobq.complete_held(bigint[], jsonb[])
-- @replace-function jobq.take(text, integer)
-- @replace-function jobq.cancel(bigint)
-- @replace-function jobq.cancel_jobs(text, text, jsonb)
-- @replace-function jobq.reap(integer)
-- @replace-function jobq._settle(bigint[])
-- @replace-function jobq._finish_dependents(bigint[], text)

-- a failed attempt: one retry-or-bury step
-- @function jobq._retry_or_bury(jobq._job, integer, text, text, timestamptz, boolean)
-- @replace-function jobq.fail(bigint, text, uuid, timestamptz)
-- @replace-function jobq.fail_held(bigint, text, timestamptz)

-- the claim: one lease UPDATE
-- @replace-function jobq._claim(text[], integer, text, interval)

-- the full claim path: a queue's budget and the group-head re-check apart
-- @function jobq._queue_slots(text, integer, timestamptz)
-- @function jobq._pick_candidates(text[], integer[], interval[], integer)
-- @function jobq._group_heads_only(bigint[], interval[], text[])
-- @replace-function jobq._pick(text[], integer, interval, timestamptz)

-- enqueue_many: its checks apart
-- @function jobq._check_enqueue_many_args(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text)
-- @function jobq._check_job_keys(text[], integer)
-- @replace-function jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text)

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

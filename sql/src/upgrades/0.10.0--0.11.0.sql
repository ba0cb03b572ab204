-- jobq 0.10.0 → 0.11.0. One line per change:
--   complete, fail, heartbeat, release, snooze: the lease token is a uuid only; the text-token
--     overloads are dropped (with jobq._lease_token), so a driver that prepares `jobq.complete($1, $2)`
--     (asyncpg, postgres.js) is asked for a uuid and can pass back what claim returned (issue 29).
--   _retry_or_bury (fail, fail_held): NOTIFY only when the retry is due now or a slot or group is freed,
--     not while it waits out its backoff (issue 29).
--   next_run_at: its COMMENT says the next scheduled time (it said "ready") (issue 29).
--   claim (both), take, hold: n is a bigint (was integer), so an int8 parameter (JDBC's setLong, a
--     postgres.js BigInt) finds them; _check_batch, _check_claim_args and _claim_args_ok take it as
--     bigint, out of range still JQ007 (issue 29).
--   running jobs under control (issue 26, items 1-2):
--   * jobq.cancel() and jobq.cancel_jobs() of a running job send NOTIFY jobq_cancel ('id:lease_token' pairs, new
--     jobq._notify_cancelled) at commit, so that its worker stops the handler at once, not at its next heartbeat
--   * new jobq.progress(id, lease_token, progress jsonb) (jobq_worker): a running job's progress in the new column
--     jobq._job.progress (capped by max_payload_bytes, JQ003), shown by jobq.jobs (new last column progress) and
--     returned by claim (jobq.job gets the attribute progress; jobq._claim and jobq._lock_ready return it)
--   enqueue: a job without key, group, timeout or parents is inserted by one statement (issue 24)

-- Applied by ALTER EXTENSION jobq UPDATE TO '0.11.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.10.0 is installed.

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
    IF jobq.version() <> '0.10.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.10.0 to 0.11.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.11.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

-- @replace-function jobq.version()
-- @replace-function jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text)

-- The lease token as text (issue 29): an untyped token now resolves to the uuid functions.
DROP FUNCTION jobq.complete(bigint, text, jsonb);
DROP FUNCTION jobq.fail(bigint, text, text, timestamptz);
DROP FUNCTION jobq.heartbeat(bigint, text, interval);
DROP FUNCTION jobq.release(bigint, text);
DROP FUNCTION jobq.snooze(bigint, text, timestamptz);
DROP FUNCTION jobq._lease_token(text);
-- @replace-function jobq._retry_or_bury(jobq._job, integer, text, text, timestamptz, boolean)
-- @replace-function jobq.next_run_at(text[])

-- n as bigint (issue 29): a new signature each, so DROP and CREATE (and the GRANTs below).
DROP FUNCTION jobq.claim(text, integer, text, interval);
DROP FUNCTION jobq.claim(text[], integer, text, interval);
DROP FUNCTION jobq.take(text, integer);
DROP FUNCTION jobq.hold(text, integer);
DROP FUNCTION jobq._check_batch(integer, text, integer);
DROP FUNCTION jobq._check_claim_args(text[], integer, interval);
DROP FUNCTION jobq._claim_args_ok(text[], integer, interval, text);
-- @function jobq._check_batch(bigint, text, integer)
-- @function jobq._check_claim_args(text[], bigint, interval)
-- @function jobq._claim_args_ok(text[], bigint, interval, text)
-- @function jobq.claim(text, bigint, text, interval)
-- @function jobq.claim(text[], bigint, text, interval)
-- @function jobq.take(text, bigint)
-- @function jobq.hold(text, bigint)

-- running jobs (issue 26): a job's progress, on the live row and in the row a claim returns
ALTER TABLE jobq._job ADD COLUMN progress jsonb;
COMMENT ON COLUMN jobq._job.progress IS
    'The last progress its holder reported (jobq.progress: any small JSON value); kept while the job is live, so that a later attempt can resume from it.';
ALTER TYPE jobq.job ADD ATTRIBUTE progress jsonb;
COMMENT ON TYPE jobq.job IS 'A claimed job. Pass lease_token to complete/fail/heartbeat/progress: it fences the lease. progress: the last one reported (by an earlier attempt, after a retry).';

-- @replace-function jobq._claim(text[], integer, text, interval)
-- @replace-function jobq._lock_ready(text, integer)
-- @function jobq.progress(bigint, uuid, jsonb)
-- @function jobq._notify_cancelled(bigint[], uuid[])
-- @replace-function jobq.cancel(bigint)
-- @replace-function jobq.cancel_jobs(text, text, jsonb)
-- @replace-view jobq.jobs

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

GRANT EXECUTE ON FUNCTION jobq.progress(bigint, uuid, jsonb) TO jobq_worker;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    jobq.claim(text, bigint, text, interval),
    jobq.claim(text[], bigint, text, interval),
    jobq.take(text, bigint),
    jobq.hold(text, bigint)
TO jobq_worker;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

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

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

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

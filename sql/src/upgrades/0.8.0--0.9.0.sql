-- jobq 0.8.0 → 0.9.0: a producer's open transaction no longer freezes the jobs it names. One line per change:
--   workflows, watch and cascades (issue 25, items 1-3):
--   plans that do not depend on statistics, costs that do not grow with the backlog (issue 24):
--   per-queue privileges (issue 25, item 4):
--   * new jobq.grant_queue(role, queue_pattern, privilege) and jobq.revoke_queue (jobq_admin), kept in
--     the new table jobq._queue_grant (dumped with the extension), shown by the new view jobq.queue_grants
--   * a queue that grants of a privilege match allows it only to their roles and jobq_admin: produce
--     (enqueue, enqueue_many, enqueue_callback), consume (claim, take, hold, complete_held, fail_held),
--     read (status, result, parent_results, watch, depends_on and members answer JQ019 as for an
--     unknown id; jobq.jobs, job_errors and job_dependencies hide the rows); new SQLSTATEs JQ020, JQ021
--   * serial groups: a member scheduled for later that never started no longer holds back the members
--     behind it (jobq._pick); one that goes ahead locks the group's oldest member (jobq._lock_group_head)
--   smaller fixes (issue 25, item 5):
--
-- Applied by ALTER EXTENSION jobq UPDATE TO '0.9.0', or with psql -f / pyqueue
-- upgrade on a database where jobq 0.8.0 is installed.

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
    IF jobq.version() <> '0.8.0' THEN
        RAISE EXCEPTION 'jobq: this script upgrades 0.8.0 to 0.9.0, but version % is installed', jobq.version()
            USING ERRCODE = 'JQ000', HINT = 'Apply the upgrade scripts in order, or use pyqueue upgrade.';
    END IF;
END
$guard$;
INSERT INTO jobq._migration (version) VALUES ('0.9.0');

---------------------------------------------------------------------------
-- functions
---------------------------------------------------------------------------

-- @replace-function jobq.version()

-- tables (new or changed), each section its own

-- per-queue privileges (issue 25, item 4): the grants, kept by pg_dump as the other settings are
CREATE TABLE jobq._queue_grant (
    role           text NOT NULL,
    queue_pattern  text NOT NULL,
    privilege      text NOT NULL,
    granted_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    granted_by     text NOT NULL,
    -- The pattern for LIKE: _ escaped (queue names have no % or \), a trailing * as %.
    queue_like     text NOT NULL
                   GENERATED ALWAYS AS (regexp_replace(replace(queue_pattern, '_', '\_'), '[*]$', '%')) STORED,
    CONSTRAINT queue_grant_pkey PRIMARY KEY (role, queue_pattern, privilege),
    CONSTRAINT queue_grant_role_length CHECK (char_length(role) BETWEEN 1 AND 63),
    CONSTRAINT queue_grant_pattern_valid CHECK (
        queue_pattern ~ '^([A-Za-z0-9_.:-]{1,128}|[A-Za-z0-9_.:-]{0,127}[*])$'),
    CONSTRAINT queue_grant_privilege_valid CHECK (privilege IN ('produce', 'consume', 'read'))
);
COMMENT ON TABLE jobq._queue_grant IS
    'Per-queue privileges: who may produce, consume or read on the queues a pattern matches. Private: use jobq.grant_queue() and jobq.queue_grants.';
DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._queue_grant', '');
    END IF;
END
$dump$;

-- workflows, watch and cascades (issue 25, items 1-3)

-- plans and costs (issue 24)

-- per-queue privileges (issue 25, item 4)

-- @function jobq._caller()
-- @function jobq._denied_queue(text[], text)
-- @function jobq._check_queue_privilege(text[], text)
-- @function jobq._job_allowed(bigint, text)
-- @function jobq._check_readable_jobs(bigint[], text)
-- @function jobq._lock_group_head(text, text, bigint)
-- @function jobq._check_grant_args(name, text, text, boolean)
-- @function jobq.grant_queue(name, text, text)
-- @function jobq.revoke_queue(name, text, text)
-- @replace-function jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text)
-- @replace-function jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text)
-- @replace-function jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer)
-- @replace-function jobq.claim(text, integer, text, interval)
-- @replace-function jobq.claim(text[], integer, text, interval)
-- @replace-function jobq.take(text, integer)
-- @replace-function jobq.hold(text, integer)
-- @replace-function jobq._pick(text[], integer, interval, timestamptz)
-- @replace-function jobq.complete_held(bigint[], jsonb[])
-- @replace-function jobq.fail_held(bigint, text, timestamptz)
-- @replace-function jobq.status(bigint)
-- @replace-function jobq.result(bigint)
-- @replace-function jobq.parent_results(bigint)
-- @replace-function jobq.watch(bigint)
-- @view jobq._read_pattern
-- @replace-view jobq.jobs
-- @replace-view jobq.job_errors
-- @replace-view jobq.job_dependencies
-- @view jobq.queue_grants

GRANT EXECUTE ON FUNCTION jobq.grant_queue(name, text, text), jobq.revoke_queue(name, text, text) TO jobq_admin;
GRANT SELECT ON jobq.queue_grants TO jobq_viewer;
GRANT SELECT ON jobq._queue_grant, jobq._read_pattern TO jobq_admin;

-- smaller fixes (issue 25, item 5)

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

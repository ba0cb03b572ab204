-- jobq 0.8.0 → 0.9.0: a producer's open transaction no longer freezes the jobs it names. One line per change:
--   workflows, watch and cascades (issue 25, items 1-3):
--   * new jobq._at_commit (unlogged) and its deferred constraint trigger running new
--     jobq._settle_at_commit(): jobs named by depends_on, enqueue_callback's members and watch() are
--     flagged (has_children, watched) and their waiting children's gates recounted when the naming
--     transaction commits, not locked from the call until then
--   * jobq._lock_parents() dropped; new jobq._check_parents_issued() does its JQ019 check alone;
--     enqueue, enqueue_many, enqueue_callback, _attach and watch call the new pair
--   * jobq._restore_descendants(): a retry that brings parents back puts the children their failure
--     released and nobody claimed yet ('run' children, batch callbacks) back to waiting, recounted
--   * jobq._finish_dependents(): a failure's cascade is one recursive pass (linear in the edges it
--     follows; a chain 3,000 deep took 15 s)
--   * jobq._finish_dependents(), _gate_recount(), _settle(), _attach(), _restore_descendants(): planned at
--     each call (plan_cache_mode force_custom_plan) with the tables' sizes of then, so that a graph built in
--     one transaction, or in a never-analyzed database, costs the same per job at any size
--   plans that do not depend on statistics, costs that do not grow with the backlog (issue 24):
--     the claim paths (_claim, _pick, _lock_ready, _plain_leases, _crowded_queues) pin their plans: no sort, no bitmap scan
--     _job.parked_expires_at (generated) and _job_parked_expiry_idx: parked leases by expiry, without the ready or waiting jobs
--     _leased_in_place: the leases in place, walked at the head of each queue's claim order; _running: every running job
--     reap reads only leases (parked by index, in place by _leased_in_place), its plans pinned
--     _queue_counts, _live_queues, _dead_queues: counts exact up to 10,000 jobs per queue, estimated above, names by skip scans
--     stats (new column estimated), queues and workers read those; jobq_viewer may call _queue_counts and _running
--   * jobq._finish() and jobq._record_errors(): index paths only (no sequential scan, hash or merge
--     join), so that a session's generic plan made while _job held a few rows does not scan a backlog
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
--     jobq.every(..., runner => 'workers') and jobq.unschedule work for a role without USAGE on schema cron
--       (new jobq._cron_unschedule_own: only the caller's own pg_cron job, and only when it may use pg_cron);
--       jobq._require_pg_cron raises JQ014 naming the missing USAGE, with a HINT, instead of a bare 42501.
--     array arguments are lists: more than one dimension is refused with the argument's JQ SQLSTATE, and an
--       element is named by its own subscript in errors (depends_on, members, payloads, job_keys, queues, ids,
--       lease_tokens, results): _check_dependencies, _check_results, _check_claim_args, _claim_args_ok,
--       enqueue_many, complete_held, complete_many, next_run_at.
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

-- plans and costs (issue 24): the lease expiry of parked jobs, by an index of its own
ALTER TABLE jobq._job ADD COLUMN parked_expires_at timestamptz
    GENERATED ALWAYS AS (CASE WHEN parked THEN lease_expires_at END) STORED;
COMMENT ON COLUMN jobq._job.parked_expires_at IS
    'The lease expiry of a parked running job (generated from parked and lease_expires_at; NULL otherwise): what jobq.reap finds expired parked leases by.';
CREATE INDEX _job_parked_expiry_idx ON jobq._job (parked_expires_at)
    WHERE parked_expires_at IS NOT NULL;

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
CREATE UNLOGGED TABLE jobq._at_commit (
    xact      xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    parents   bigint[] NOT NULL DEFAULT '{}',
    children  bigint[] NOT NULL DEFAULT '{}',
    watched   bigint[] NOT NULL DEFAULT '{}',
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._at_commit IS
    'Jobs named by this transaction (parents, waiting children, watched), settled at its commit. Private.';
CREATE INDEX _at_commit_xact_idx ON jobq._at_commit (xact);
REVOKE ALL ON jobq._at_commit FROM PUBLIC;
REVOKE ALL ON SEQUENCE jobq._at_commit_id_seq FROM PUBLIC;
GRANT SELECT ON jobq._at_commit TO jobq_admin;

-- workflows, watch and cascades (issue 25, items 1-3)
DROP FUNCTION jobq._lock_parents(bigint[], text);
-- @function jobq._check_parents_issued(bigint[], text)
-- @replace-function jobq._attach(bigint[], bigint[], text, boolean)
-- @function jobq._settle_at_commit()
CREATE CONSTRAINT TRIGGER _500_settle_at_commit
    AFTER INSERT ON jobq._at_commit
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION jobq._settle_at_commit();
-- @replace-function jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint)
-- @replace-function jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text)
-- @replace-function jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text)
-- @replace-function jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer)
-- @replace-function jobq.watch(bigint)
-- @replace-function jobq._restore_descendants(bigint)
-- @replace-function jobq._finish_dependents(bigint[], text)
-- @replace-function jobq._gate_recount(bigint[])
-- @replace-function jobq._settle(bigint[])

-- plans and costs (issue 24)

-- @view jobq._live_queues
-- @view jobq._dead_queues
-- @function jobq._leased_in_place(timestamptz)
-- @function jobq._running()
-- @function jobq._live_sample(timestamptz)
-- @function jobq._queue_counts()
-- @replace-function jobq._plain_leases(text[], interval)
-- @replace-function jobq._crowded_queues(text[], timestamptz)
-- @replace-function jobq._pick(text[], integer, interval, timestamptz)
-- @replace-function jobq._claim(text[], integer, text, interval)
-- @replace-function jobq._lock_ready(text, integer)
-- @replace-function jobq.reap(integer)
-- @replace-view jobq.stats
-- @replace-view jobq.queues
-- @replace-view jobq.workers
-- @replace-function jobq._record_errors(bigint[], integer[], text[], text[])
GRANT EXECUTE ON FUNCTION jobq._queue_counts(), jobq._running() TO jobq_viewer;
GRANT SELECT ON jobq._live_queues, jobq._dead_queues TO jobq_admin;

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
-- (enqueue, enqueue_many, enqueue_callback and watch are replaced above with the workflows' changes, _pick with the plans')
-- @replace-function jobq.claim(text, integer, text, interval)
-- @replace-function jobq.claim(text[], integer, text, interval)
-- @replace-function jobq.take(text, integer)
-- @replace-function jobq.hold(text, integer)
-- @replace-function jobq.complete_held(bigint[], jsonb[])
-- @replace-function jobq.fail_held(bigint, text, timestamptz)
-- @replace-function jobq.status(bigint)
-- @replace-function jobq.result(bigint)
-- @replace-function jobq.parent_results(bigint)
-- @view jobq._read_pattern
-- @replace-view jobq.jobs
-- @replace-view jobq.job_errors
-- @replace-view jobq.job_dependencies
-- @view jobq.queue_grants

GRANT EXECUTE ON FUNCTION jobq.grant_queue(name, text, text), jobq.revoke_queue(name, text, text) TO jobq_admin;
GRANT SELECT ON jobq.queue_grants TO jobq_viewer;
GRANT SELECT ON jobq._queue_grant, jobq._read_pattern TO jobq_admin;

-- smaller fixes (issue 25, item 5)
-- @function jobq._cron_unschedule_own(text)
-- @replace-function jobq._require_pg_cron()
-- @replace-function jobq.every(text, text, text, jsonb, integer, integer, text)
-- @replace-function jobq.unschedule(text)
-- @replace-function jobq._check_dependencies(bigint[], text, text)
-- @replace-function jobq._check_results(bigint[], jsonb[])
-- @replace-function jobq._check_claim_args(text[], integer, interval)
-- @replace-function jobq._claim_args_ok(text[], integer, interval, text)
-- (jobq.enqueue_many is replaced above, with the workflows' changes)
-- (jobq.complete_held is replaced above, with the per-queue privileges)
-- @replace-function jobq.complete_many(bigint[], uuid[], jsonb[])
-- @replace-function jobq.next_run_at(text[])

---------------------------------------------------------------------------
-- privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
-- smaller fixes (issue 25, item 5)
GRANT EXECUTE ON FUNCTION jobq._cron_unschedule_own(text) TO jobq_admin;

-- The caller's search_path back (psql -f, pyqueue; CREATE EXTENSION restores it itself).
DO $path$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq') THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('jobq.caller_search_path'), false);
    END IF;
END
$path$;

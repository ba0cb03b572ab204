-- jobq 0.14.0 — a job queue that lives inside PostgreSQL.
--
-- This one file installs jobq two ways:
--   * CREATE EXTENSION jobq            (after `make install`)
--   * psql -f sql/jobq--0.14.0.sql      (managed Postgres, no superuser)
-- so it has no `\quit` guard, schema-qualifies every name, and asks whether
-- it runs inside CREATE EXTENSION before calling extension-only functions.
--
-- Released install scripts are frozen: a change is a new version plus an
-- upgrade script (sql/jobq--0.14.0--X.Y.Z.sql).
--
-- Sections
--   1. schema, roles, version bookkeeping
--   2. tables: live jobs, finished-job archive, error history, counters, per-queue settings,
--      periodic jobs, key completions (unique_for), take bookkeeping
--   3. validation helpers (jobq's SQLSTATEs, class JQ)
--   4. private helpers: settings, backoff, finishing jobs, counters, the claim paths
--   5. producer API: enqueue, enqueue_many
--   6. worker API: claim, take, hold, complete_held, fail_held, complete, fail, heartbeat, release,
--      snooze (each also with the lease token as text), reap, next_run_at
--   7. operator API: retry, retry_dead, run_now, cancel, cancel_jobs, discard_dead, prune,
--      configure_queue, reset_queue, pause, resume, schedule_maintenance, unschedule_maintenance,
--      periodic jobs (every, unschedule, enqueue_periodic, run_schedules)
--   8. views: stats, jobs, queues, schedules, workers, throughput, job_errors; metrics()
--   9. privileges
--
-- SQLSTATEs (documented in README.md, mapped to Python exceptions):
--   JQ001 invalid queue name        JQ008 invalid lease / interval
--   JQ002 invalid payload           JQ009 invalid job_key
--   JQ003 payload too large         JQ010 missing id or lease token
--   JQ004 invalid priority          JQ011 invalid worker name
--   JQ005 invalid max_attempts      JQ012 invalid queue setting
--   JQ006 invalid time (run_at)     JQ013 job_key held by an active job
--   JQ007 invalid batch size        JQ014 pg_cron not available
--   JQ015 claim outside READ COMMITTED
--   JQ016 invalid or unknown periodic job name
--   JQ017 invalid argument (NULL, or not one of its allowed values)
--   JQ000 an upgrade script applied to the wrong version

---------------------------------------------------------------------------
-- 1. schema, roles, version bookkeeping
---------------------------------------------------------------------------

-- Resolve every unqualified operator and type below in pg_catalog only,
-- whatever the installing session's search_path was, and leave that
-- search_path as it was: under CREATE/ALTER EXTENSION the setting is local to
-- the command (a plain SET here would outlive it, and the session's next
-- CREATE TABLE would land in pg_catalog); under psql -f or pyqueue it is put
-- back at the end of this file.
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

CREATE SCHEMA jobq;
COMMENT ON SCHEMA jobq IS 'jobq: a job queue inside PostgreSQL. Public API: functions and views without a leading underscore.';

DO $roles$
DECLARE
    v_role text;
BEGIN
    -- Roles are cluster-wide: create each only when missing, so a second
    -- database (or a reinstall) reuses them. Two installs into different
    -- databases at once may both try: the loser of that race moves on.
    -- jobq_viewer reads the public views and jobq.metrics(), nothing else.
    FOREACH v_role IN ARRAY ARRAY['jobq_producer', 'jobq_worker', 'jobq_admin', 'jobq_viewer'] LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = v_role);
        BEGIN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END LOOP;
END
$roles$;

GRANT jobq_producer, jobq_worker, jobq_viewer TO jobq_admin;

-- Versions applied to this database, one row per install or upgrade script.
-- pyqueue install/upgrade reads it on databases without CREATE EXTENSION.
CREATE TABLE jobq._migration (
    version     text PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT migration_version_semver CHECK (version ~ '^[0-9]+\.[0-9]+\.[0-9]+$')
);
COMMENT ON TABLE jobq._migration IS 'jobq versions applied to this database (install and upgrade scripts).';
INSERT INTO jobq._migration (version) VALUES ('0.14.0');

CREATE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.14.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

---------------------------------------------------------------------------
-- 2. tables
---------------------------------------------------------------------------

-- Live jobs only: waiting (for parents), ready (run_at <= now()), scheduled
-- (run_at > now()) and running. Finished jobs leave it (to jobq._job_archive when history keeps
-- them), so what claim scans stays small however much history is kept.
-- A claim writes no indexed column (status and the lease are in no index),
-- so with the page room that fillfactor leaves, its UPDATE is HOT.
CREATE TABLE jobq._job (
    id                bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    queue             text NOT NULL,
    payload           jsonb NOT NULL,
    status            text NOT NULL DEFAULT 'ready',
    priority          smallint NOT NULL DEFAULT 0,
    run_at            timestamptz NOT NULL DEFAULT pg_catalog.now(),
    attempts          integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL,
    job_key           text,
    lease_token       uuid,
    lease_expires_at  timestamptz,
    worker            text,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    started_at        timestamptz,
    group_key         text,
    parked            boolean NOT NULL DEFAULT false,
    timeout           interval,
    heartbeat_at      timestamptz,
    has_children      boolean NOT NULL DEFAULT false,
    has_parents       boolean NOT NULL DEFAULT false,
    watched           boolean NOT NULL DEFAULT false,
    -- The lease expiry of a parked job, in an index of its own (below):
    -- running jobs the claim index no longer holds are found by it. A
    -- fast-path claim leaves it NULL (it leases in place, unparked), so its
    -- update writes no indexed value and stays HOT.
    parked_expires_at timestamptz GENERATED ALWAYS AS (CASE WHEN parked THEN lease_expires_at END) STORED,
    progress          jsonb,
    meta              jsonb,
    -- The fair key (enqueue's fair_key): a fair queue is claimed round-robin
    -- across its keys. '' is no user's key: a job without one in a fair
    -- queue (all such jobs share that one turn).
    fair_key          text COLLATE "C",
    CONSTRAINT job_status_valid CHECK (status IN ('ready', 'running', 'waiting')),
    CONSTRAINT job_queue_length CHECK (char_length(queue) BETWEEN 1 AND 128),
    CONSTRAINT job_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT job_attempts_valid CHECK (attempts >= 0 AND max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT job_lease_when_running CHECK (
        (status = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT job_group_key_length CHECK (char_length(group_key) BETWEEN 1 AND 512),
    CONSTRAINT job_parked_when_running CHECK (NOT parked OR status IN ('running', 'waiting')),
    CONSTRAINT job_waiting_parked CHECK (status <> 'waiting' OR parked),
    CONSTRAINT job_timeout_range CHECK (timeout BETWEEN interval '1 second' AND interval '1 day'),
    CONSTRAINT job_fair_key_length CHECK (char_length(fair_key) <= 512)
) WITH (
    -- A queue table churns: every row is inserted, updated once or twice
    -- and deleted within seconds. Vacuum early and without throttling.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0,
    -- Room on every page for the new row versions of a claim: a leased row is
    -- about 45 % larger than a ready one (lease token, expiry, worker, start),
    -- so a page whose every row gets leased needs 60 % of it free.
    fillfactor = 40
);
COMMENT ON TABLE jobq._job IS 'Live jobs (waiting, ready, scheduled, running). Private: use the jobq functions and views.';
COMMENT ON COLUMN jobq._job.parked IS
    'A running job kept out of the claim index (its lease outlived a heartbeat, or its queue has limits).';
COMMENT ON COLUMN jobq._job.timeout IS
    'The longest a handler may run (enqueue''s timeout); NULL: the queue''s timeout setting, if any.';
COMMENT ON COLUMN jobq._job.heartbeat_at IS
    'The last heartbeat of the current lease; NULL until its first heartbeat (claim does not set it) and when not running.';
COMMENT ON COLUMN jobq._job.has_children IS
    'Some job was enqueued depending on this one (jobq._job_dep): finishing it updates their gates. Set by the child''s enqueue.';
COMMENT ON COLUMN jobq._job.has_parents IS
    'This job was enqueued with depends_on (or as a batch callback): its edges in jobq._job_dep go when it does.';
COMMENT ON COLUMN jobq._job.watched IS
    'Someone waits for this job (jobq.watch): finishing it sends NOTIFY jobq_finished with its id.';
COMMENT ON COLUMN jobq._job.parked_expires_at IS
    'The lease expiry of a parked running job (generated from parked and lease_expires_at; NULL otherwise): what jobq.reap finds expired parked leases by.';
COMMENT ON COLUMN jobq._job.fair_key IS
    'The fair key (enqueue''s fair_key): a fair queue serves its keys round-robin; '''' for a job of a fair queue enqueued without one.';
COMMENT ON COLUMN jobq._job.progress IS
    'The last progress its holder reported (jobq.progress: any small JSON value); kept while the job is live, so that a later attempt can resume from it.';
COMMENT ON COLUMN jobq._job.meta IS
    'The JSON object its producer attached beside the payload (enqueue''s meta: tags, W3C trace context), capped like the payload; NULL when none.';

-- Exactly the claim query: equality on queue, ORDER BY priority, run_at, id.
-- Fresh leases stay in it (claim writes no indexed column, so its UPDATE is
-- HOT) and are skipped by their status; parked ones leave it.
CREATE INDEX _job_claim_idx ON jobq._job (queue, priority, run_at, id)
    WHERE NOT parked;
-- Fair queues: the due keys one after another (a skip scan over fair_key),
-- and each key's most urgent jobs in claim order. Only jobs with a fair key
-- (every job of a fair queue has one, '' when none was given), so a plain
-- queue's enqueue writes no entry here.
CREATE INDEX _job_fair_idx ON jobq._job (queue, fair_key, priority, run_at, id)
    WHERE fair_key IS NOT NULL AND NOT parked;
-- Unique jobs: one active job per (queue, job_key). Every row here is active.
CREATE UNIQUE INDEX _job_key_idx ON jobq._job (queue, job_key)
    WHERE job_key IS NOT NULL;
-- Serial groups: find a group's head (lowest id) and its running job.
CREATE INDEX _job_group_idx ON jobq._job (queue, group_key, id)
    WHERE group_key IS NOT NULL;
-- Running jobs of limited queues (always parked), for their concurrency
-- count, and waiting jobs (parked too: out of the claim index).
CREATE INDEX _job_parked_idx ON jobq._job (queue)
    WHERE parked;
-- Parked running jobs by lease expiry (only they have one): reap reads the
-- expired ones, and jobq.workers and jobq.stats every one, without visiting
-- the ready or waiting jobs. Running jobs that are not parked are leased in
-- place near the head of the claim index (plain and fair claims);
-- jobq._leased_in_place finds those.
CREATE INDEX _job_parked_expiry_idx ON jobq._job (parked_expires_at)
    WHERE parked_expires_at IS NOT NULL;

-- Finished jobs: completed ones for their queue's retention (none by
-- default), dead (out of attempts) and cancelled ones until retried or past
-- dead_retention. Partitioned by expiry (prune_after: finish time plus that
-- job's retention), one partition per UTC day, so that pruning drops a whole
-- day's partition once the day has passed (every row in it has expired)
-- instead of deleting rows. Finish days would not do: rows finished the same
-- day expire at different times (each queue has its retentions; dead jobs
-- stay until retried), so one long-kept row would pin its whole day.
-- Day partitions (jobq._job_archive_pYYYYMMDD) are created ahead by
-- jobq.prune() (jobq._archive_add), not by the install script: an
-- extension's own tables could not be dropped. No primary key: a
-- partitioned table's would have to include prune_after, which may be NULL;
-- ids stay unique, as a job is in jobq._job or here, moved by DELETE ...
-- RETURNING. Partitioned tables take no storage parameters: each partition
-- gets its own.
CREATE TABLE jobq._job_archive (
    id            bigint NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    status        text NOT NULL,
    priority      smallint NOT NULL,
    run_at        timestamptz NOT NULL,
    attempts      integer NOT NULL,
    max_attempts  integer NOT NULL,
    job_key       text,
    worker        text,
    last_error    text,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    prune_after   timestamptz,
    group_key     text,
    timeout       interval,
    result        jsonb,
    cancelled_by  bigint,
    meta          jsonb,
    fair_key      text COLLATE "C",
    CONSTRAINT job_archive_status_valid CHECK (status IN ('completed', 'dead', 'cancelled'))
) PARTITION BY RANGE (prune_after);
COMMENT ON TABLE jobq._job_archive IS
    'Finished jobs (completed, dead, cancelled) kept for their retention, partitioned by expiry day. Private.';
COMMENT ON COLUMN jobq._job_archive.prune_after IS
    'Not pruned before this time: jobq.prune() drops the row''s day partition once the whole day has passed; NULL keeps it until retried.';
COMMENT ON COLUMN jobq._job_archive.result IS 'What the job''s complete() reported (any JSON value); NULL when none.';
COMMENT ON COLUMN jobq._job_archive.fair_key IS
    'The job''s fair key (enqueue''s fair_key), kept so that a retry puts it back in its key''s turn.';
COMMENT ON COLUMN jobq._job_archive.cancelled_by IS
    'The ancestor whose death or cancellation cancelled this job (the root of the cascade); jobq.retry of it restores this job.';
COMMENT ON COLUMN jobq._job_archive.meta IS 'The job''s meta (enqueue''s meta), kept with it.';

-- The default partition: rows kept until retried (NULL prune_after: dead
-- and cancelled jobs of queues without dead_retention, the default), and
-- rows expiring on a day that has no partition yet (beyond the days created
-- ahead, or before maintenance first ran). jobq.prune() deletes its expired
-- rows one by one, and moves a day's rows out when it creates that day.
CREATE TABLE jobq._job_archive_kept PARTITION OF jobq._job_archive DEFAULT WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_archive_kept IS
    'The archive''s default partition: jobs kept until retried, and those expiring on a day without a partition. Private.';
-- Its indexes, and those of every day partition, are made by
-- jobq._archive_index (sql/src/archive.sql), after the functions. Partitions
-- have indexes of their own and the parent has none: a partitioned index of
-- an extension's table would make pg_restore create every day partition's
-- indexes twice (once by ATTACH, once from the dump).

-- Dependencies: one row per (parent, child) edge, from the child's enqueue
-- until the child leaves jobq (finished without history, pruned or
-- discarded). Parents exist before their children, so the graph has no
-- cycle. Finishing a parent looks its children up by the primary key.
CREATE TABLE jobq._job_dep (
    parent_id  bigint NOT NULL,
    child_id   bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id),
    CONSTRAINT job_dep_not_self CHECK (parent_id <> child_id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_dep IS 'Job dependencies (parent, child), while the child exists. Private: read jobq.job_dependencies.';
CREATE INDEX _job_dep_child_idx ON jobq._job_dep (child_id, parent_id);

-- The gate of each waiting job: how many of its parents are still live, and
-- how the finished ones ended. Finishing a parent updates its children's
-- gates (row-locked in id order); the update that brings parents_left to 0
-- releases the job in that transaction. Every job enqueued with parents
-- has one, from its enqueue until it leaves jobq with its edges (finished
-- without history, pruned or discarded): a retry of the job, once it was
-- released or cancelled, goes through its gate again (recounted), so it
-- never runs before its parents completed.
CREATE TABLE jobq._job_wait (
    job_id             bigint PRIMARY KEY,
    parents_left       integer NOT NULL,
    completed          integer NOT NULL DEFAULT 0,
    dead               integer NOT NULL DEFAULT 0,
    cancelled          integer NOT NULL DEFAULT 0,
    on_parent_failure  text NOT NULL,
    report             boolean NOT NULL DEFAULT false,
    CONSTRAINT job_wait_counts_valid CHECK (parents_left >= 0 AND completed >= 0 AND dead >= 0 AND cancelled >= 0),
    CONSTRAINT job_wait_on_parent_failure_valid CHECK (on_parent_failure IN ('cancel', 'run'))
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_cost_delay = 0,
    fillfactor = 50
);
COMMENT ON TABLE jobq._job_wait IS 'Waiting jobs: parents still live, finished parents by outcome, what a parent failure does. Private.';
COMMENT ON COLUMN jobq._job_wait.report IS
    'A batch callback (jobq.enqueue_callback): released with the counts of its members'' outcomes in its payload.';

-- The error of every failed attempt (fail, fail_held, an expired lease
-- reaped), the last 25 per job; last_error holds only the latest. Rows live
-- as long as their job: deleted when it leaves the live table without being
-- archived, or when its archive row is pruned or discarded.
CREATE TABLE jobq._job_error (
    job_id     bigint NOT NULL,
    attempt    integer NOT NULL,
    error      text NOT NULL,
    failed_at  timestamptz NOT NULL,
    worker     text
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._job_error IS 'The error of each failed attempt (the last 25 per job), as long as the job exists. Private: read jobq.job_errors.';
CREATE INDEX _job_error_job_idx ON jobq._job_error (job_id, failed_at);

-- Per-queue settings. A NULL column (or a queue without a row) means the
-- default from jobq._queue_defaults (jobq._settings() applies it).
CREATE TABLE jobq._queue (
    queue              text PRIMARY KEY,
    max_attempts       integer,
    backoff_base       interval,
    backoff_cap        interval,
    backoff_jitter     double precision,
    lease              interval,
    retention          interval,
    dead_retention     interval,
    max_payload_bytes  integer,
    updated_at         timestamptz NOT NULL DEFAULT pg_catalog.now(),
    concurrency        integer,
    rate_limit         integer,
    rate_interval      interval,
    paused             boolean,
    timeout            interval,
    result_retention   interval,
    fair               boolean,
    fair_weights       jsonb,
    per_key_concurrency integer,
    -- A fair queue's round-robin cursor: the key its last claim served last,
    -- and how many of that key's turns of the round it has had.
    fair_cursor        text,
    fair_turns         integer,
    CONSTRAINT queue_name_valid CHECK (queue ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    -- Named queue_<column>_range: configure_queue() names the setting from it.
    CONSTRAINT queue_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT queue_backoff_base_range CHECK (backoff_base BETWEEN interval '0' AND interval '1 day'),
    CONSTRAINT queue_backoff_cap_range CHECK (backoff_cap BETWEEN interval '0' AND interval '30 days'),
    CONSTRAINT queue_backoff_jitter_range CHECK (backoff_jitter BETWEEN 0 AND 1),
    CONSTRAINT queue_lease_range CHECK (lease BETWEEN interval '1 second' AND interval '1 day'),
    CONSTRAINT queue_retention_range CHECK (retention BETWEEN interval '0' AND interval '3650 days'),
    CONSTRAINT queue_dead_retention_range CHECK (dead_retention BETWEEN interval '1 second' AND interval '3650 days'),
    CONSTRAINT queue_max_payload_bytes_range CHECK (max_payload_bytes BETWEEN 1 AND 104857600),
    CONSTRAINT queue_concurrency_range CHECK (concurrency BETWEEN 1 AND 10000),
    CONSTRAINT queue_rate_limit_range CHECK (rate_limit BETWEEN 1 AND 1000000),
    CONSTRAINT queue_rate_interval_range CHECK (rate_interval BETWEEN interval '1 second' AND interval '1 day'),
    CONSTRAINT queue_timeout_range CHECK (timeout BETWEEN interval '1 second' AND interval '1 day'),
    CONSTRAINT queue_result_retention_range CHECK (result_retention BETWEEN interval '0' AND interval '3650 days'),
    CONSTRAINT queue_per_key_concurrency_range CHECK (per_key_concurrency BETWEEN 1 AND 10000)
);
COMMENT ON TABLE jobq._queue IS 'Per-queue setting overrides; NULL means the default. Private: use jobq.configure_queue().';

-- Per-queue privileges (jobq.grant_queue, since 0.9.0): role may produce,
-- consume or read on the queues queue_pattern matches (a queue name, or a
-- prefix followed by *). A queue that some grant of a privilege matches
-- allows it only to the roles of those grants (and their members) and
-- jobq_admin; a queue no grant of it matches keeps the role-level rules.
-- Roles by name, as pg_dump restores them; a dropped role's grants stay
-- (and keep restricting) until revoked.
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

-- Job starts of rate-limited queues: one row per claim, kept one interval.
CREATE TABLE jobq._rate_start (
    queue       text NOT NULL,
    started_at  timestamptz NOT NULL,
    n           integer NOT NULL,
    CONSTRAINT rate_start_n_positive CHECK (n > 0)
);
COMMENT ON TABLE jobq._rate_start IS 'Job starts of rate-limited queues within the current window. Private.';
CREATE INDEX _rate_start_idx ON jobq._rate_start (queue, started_at);

-- Periodic jobs registered with jobq.every().
CREATE TABLE jobq._periodic (
    name          text PRIMARY KEY,
    schedule      text NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    priority      smallint NOT NULL DEFAULT 0,
    max_attempts  integer,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    runner        text NOT NULL DEFAULT 'pg_cron',
    next_run_at   timestamptz,
    last_run_at   timestamptz,
    CONSTRAINT periodic_name_valid CHECK (name ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    CONSTRAINT periodic_runner_valid CHECK (runner IN ('pg_cron', 'workers')),
    CONSTRAINT periodic_next_when_workers CHECK ((runner = 'workers') = (next_run_at IS NOT NULL))
);
COMMENT ON TABLE jobq._periodic IS
    'Periodic jobs (jobq.every): pg_cron or the workers (jobq.run_schedules) enqueue them. Private: use jobq.schedules.';
COMMENT ON COLUMN jobq._periodic.next_run_at IS 'The next tick (UTC cron time) of a schedule the workers run; NULL under pg_cron.';
-- The next due tick of the schedules workers run.
CREATE INDEX _periodic_next_idx ON jobq._periodic (next_run_at) WHERE runner = 'workers';

-- The last completion of each (queue, job_key): what enqueue's unique_for
-- deduplicates against, whatever history the queue keeps. One row per key,
-- kept 366 days (the longest unique_for).
CREATE TABLE jobq._key_done (
    queue        text NOT NULL,
    job_key      text NOT NULL,
    job_id       bigint NOT NULL,
    finished_at  timestamptz NOT NULL,
    PRIMARY KEY (queue, job_key)
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._key_done IS 'Last completion of each (queue, job_key), for enqueue''s unique_for. Private.';
CREATE INDEX _key_done_finished_idx ON jobq._key_done (finished_at);

-- Jobs taken or held in a transaction on the full claim path (take, hold on
-- limited queues): they run inside it, so they count against the queue's
-- concurrency limit until it ends. Only jobq's functions write it; rows of
-- finished transactions are deleted by reap and prune.
CREATE UNLOGGED TABLE jobq._taken (
    xact   xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    queue  text NOT NULL,
    n      integer NOT NULL,
    CONSTRAINT taken_n_positive CHECK (n > 0)
);
COMMENT ON TABLE jobq._taken IS 'Jobs taken (take/hold) per transaction on limited queues. Private.';
CREATE INDEX _taken_xact_idx ON jobq._taken (xact, queue);

-- What a transaction that named jobs (depends_on, enqueue_callback's
-- members, watch) still has to do to them when it commits: one row per
-- naming call, read and deleted by jobq._settle_at_commit, which a deferred
-- constraint trigger on this table runs at COMMIT. Naming a job therefore
-- locks and writes nothing of it until the commit (a producer's open
-- transaction never holds up a worker). Only this transaction's rows are
-- visible to it: others' are uncommitted, and none outlives its commit.
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

-- Finished-job counters: one row per finishing statement and queue, in the
-- minute its transaction started (now()), folded into one row per queue and
-- minute by reap/prune (older than a day: one row per queue at -infinity).
-- Sums are totals.
CREATE TABLE jobq._counter (
    queue      text NOT NULL,
    bucket     timestamptz NOT NULL,
    completed  bigint NOT NULL DEFAULT 0,
    failed     bigint NOT NULL DEFAULT 0,
    dead       bigint NOT NULL DEFAULT 0
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE jobq._counter IS 'Completed jobs, failed attempts and dead-lettered jobs per queue and minute. Private: read jobq.stats.';

-- Under CREATE EXTENSION, have pg_dump keep the data of these tables (it
-- skips extension tables otherwise). Under psql -f they are plain tables.
DO $dump$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_id_seq', '');
        -- The archive's default partition; its day partitions are no
        -- extension members, so pg_dump keeps them as it keeps any table.
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_archive_kept', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._queue', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._queue_grant', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._periodic', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._counter', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._key_done', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_error', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_dep', '');
        PERFORM pg_catalog.pg_extension_config_dump('jobq._job_wait', '');
    END IF;
END
$dump$;

-- The row a worker gets from claim().
CREATE TYPE jobq.job AS (
    id                bigint,
    queue             text,
    payload           jsonb,
    priority          integer,
    attempts          integer,
    max_attempts      integer,
    run_at            timestamptz,
    created_at        timestamptz,
    lease_token       uuid,
    lease_expires_at  timestamptz,
    worker            text,
    job_key           text,
    last_error        text,
    group_key         text,
    timeout           interval,
    progress          jsonb,
    meta              jsonb
);
COMMENT ON TYPE jobq.job IS 'A claimed job. Pass lease_token to complete/fail/heartbeat/progress: it fences the lease. progress: the last one reported (by an earlier attempt, after a retry). meta: what the producer attached beside the payload (tags, trace context), or NULL.';

---------------------------------------------------------------------------
-- 3. validation helpers
---------------------------------------------------------------------------

CREATE FUNCTION jobq._check_queue(p_queue text, p_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ001 unless p_queue is a valid queue name; p_arg names the argument.
    IF p_queue IS NULL OR p_queue !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'jobq: % must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got %',
                p_arg, coalesce(pg_catalog.quote_literal(pg_catalog.left(p_queue, 200)), 'NULL')
            USING ERRCODE = 'JQ001',
                  HINT = 'Use names such as ''emails'' or ''billing.invoices''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_queue(text, text) IS 'Raises JQ001 for a NULL, empty, too long or badly spelled queue name.';

CREATE FUNCTION jobq._check_payload(p_payload jsonb, p_arg text, p_max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ002/JQ003 unless p_payload is a JSON object within the size cap.
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'jobq: % must be a JSON object, got %', p_arg,
                coalesce(jsonb_typeof(p_payload), 'NULL')
            USING ERRCODE = 'JQ002',
                  HINT = 'Wrap the value in an object, e.g. ''{"value": 42}''::jsonb.';
    END IF;
    IF pg_column_size(p_payload) > p_max_bytes THEN
        RAISE EXCEPTION 'jobq: % is % bytes, over the queue''s cap of % bytes',
                p_arg, pg_column_size(p_payload), p_max_bytes
            USING ERRCODE = 'JQ003',
                  HINT = 'Store large data in a table and enqueue its key, or raise max_payload_bytes with jobq.configure_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_payload(jsonb, text, integer) IS 'Raises JQ002 for a payload that is not a JSON object, JQ003 when over the size cap.';

CREATE FUNCTION jobq._check_meta(p_meta jsonb, p_arg text, p_max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ002/JQ003 unless p_meta (a job's meta) is NULL (none) or a JSON
    -- object within the size cap (the queue's max_payload_bytes, as a payload).
    IF p_meta IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_meta) <> 'object' THEN
        RAISE EXCEPTION 'jobq: % must be a JSON object, got %', p_arg, jsonb_typeof(p_meta)
            USING ERRCODE = 'JQ002',
                  HINT = 'Pass tags as an object, e.g. ''{"tenant": "acme"}''::jsonb, or NULL for none.';
    END IF;
    IF pg_column_size(p_meta) > p_max_bytes THEN
        RAISE EXCEPTION 'jobq: % is % bytes, over the queue''s cap of % bytes',
                p_arg, pg_column_size(p_meta), p_max_bytes
            USING ERRCODE = 'JQ003',
                  HINT = 'Keep meta small (tags, trace context): store large data in a table, or raise max_payload_bytes with jobq.configure_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_meta(jsonb, text, integer) IS 'Raises JQ002 for a meta that is neither NULL nor a JSON object, JQ003 when over the size cap.';

CREATE FUNCTION jobq._check_time(p_value timestamptz, p_arg text) RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ006 unless p_value is a finite time within 10 years of now.
    IF p_value IS NULL OR NOT isfinite(p_value)
       OR p_value > now() + interval '10 years' OR p_value < now() - interval '10 years' THEN
        RAISE EXCEPTION 'jobq: % must be a finite time within 10 years of now, got %',
                p_arg, coalesce(p_value::text, 'NULL')
            USING ERRCODE = 'JQ006',
                  HINT = 'Omit it to run now, or pass e.g. now() + interval ''5 minutes''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_time(timestamptz, text) IS 'Raises JQ006 for a NULL, infinite or absurdly distant time.';

CREATE FUNCTION jobq._check_job_options(p_priority integer, p_max_attempts integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ004/JQ005 for a priority or max_attempts out of range.
    IF p_priority IS NULL OR p_priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'jobq: priority must be between -32768 and 32767, got %',
                coalesce(p_priority::text, 'NULL')
            USING ERRCODE = 'JQ004',
                  HINT = 'Lower numbers run first; 0 is the default.';
    END IF;
    IF p_max_attempts IS NOT NULL AND p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'jobq: max_attempts must be between 1 and 1000, got %', p_max_attempts
            USING ERRCODE = 'JQ005',
                  HINT = 'Pass NULL to use the queue''s max_attempts setting.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_job_options(integer, integer) IS 'Raises JQ004 or JQ005 for a priority or max_attempts out of range.';

CREATE FUNCTION jobq._check_job_key(p_job_key text, p_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ009 for an empty or too long job key (NULL means "no key").
    IF p_job_key IS NOT NULL AND char_length(p_job_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'jobq: % must be NULL or 1 to 512 characters, got % characters',
                p_arg, char_length(p_job_key)
            USING ERRCODE = 'JQ009',
                  HINT = 'Use a short natural key such as ''invoice:42''; pass NULL for no uniqueness.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_job_key(text, text) IS 'Raises JQ009 for an empty or over-long job key.';

CREATE FUNCTION jobq._check_unique_for(p_unique_for interval, p_keyed boolean, p_key_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ008 for a unique_for that is not a duration of 1 second to
    -- 366 days, JQ009 when it comes without a job key (p_keyed false).
    PERFORM jobq._check_interval(p_unique_for, 'unique_for', interval '1 second', interval '366 days');
    IF p_unique_for IS NOT NULL AND NOT p_keyed THEN
        RAISE EXCEPTION 'jobq: unique_for needs % (it deduplicates jobs by their key)', p_key_arg
            USING ERRCODE = 'JQ009',
                  HINT = 'Pass a job key too, e.g. job_key => ''report:daily'', unique_for => interval ''1 hour''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_unique_for(interval, boolean, text) IS
    'Raises JQ008 for a unique_for out of range, JQ009 for a unique_for without a job key.';

CREATE FUNCTION jobq._check_on_duplicate(p_on_duplicate text, p_keyed boolean, p_key_arg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ017 unless p_on_duplicate is 'keep', 'replace' or
    -- 'replace_payload', JQ009 when it is not 'keep' and comes without a job
    -- key (p_keyed false: p_key_arg names the missing argument).
    IF p_on_duplicate IS NULL OR p_on_duplicate NOT IN ('keep', 'replace', 'replace_payload') THEN
        RAISE EXCEPTION 'jobq: on_duplicate must be ''keep'', ''replace'' or ''replace_payload'', got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_on_duplicate, 100)), 'NULL')
            USING ERRCODE = 'JQ017',
                  HINT = '''keep'' (the default) returns the job holding the key; ''replace'' gives it the new '
                         'payload, run_at and priority (debounce); ''replace_payload'' only the payload (throttle).';
    END IF;
    IF p_on_duplicate <> 'keep' AND NOT p_keyed THEN
        RAISE EXCEPTION 'jobq: on_duplicate % needs % (it replaces the job holding that key)',
                pg_catalog.quote_literal(p_on_duplicate), p_key_arg
            USING ERRCODE = 'JQ009',
                  HINT = 'Pass a job key too (job_keys, one per payload, for enqueue_many), e.g. '
                         'job_key => ''reindex:42'', on_duplicate => ''replace''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_on_duplicate(text, boolean, text) IS
    'Raises JQ017 for an on_duplicate other than keep, replace or replace_payload, JQ009 for replace without a job key.';

CREATE FUNCTION jobq._check_batch(p_n bigint, p_arg text, p_cap integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ007 unless 0 <= p_n <= p_cap; NULL never means "everything".
    IF p_n IS NULL OR p_n NOT BETWEEN 0 AND p_cap THEN
        RAISE EXCEPTION 'jobq: % must be between 0 and %, got %', p_arg, p_cap, coalesce(p_n::text, 'NULL')
            USING ERRCODE = 'JQ007',
                  HINT = 'Work in batches: call again for more.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_batch(bigint, text, integer) IS 'Raises JQ007 for a NULL, negative or over-cap batch size.';

CREATE FUNCTION jobq._fixed_length(p_value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Whether an interval is as long as it looks whenever it is added: no
    -- month or year part (a month is 28 to 31 days) and its days and time of
    -- one sign (a day is 23 to 25 hours across a DST change, so
    -- '1 day -23:59:59' can be negative). NULL counts as fixed.
    SELECT p_value IS NULL
        OR (date_part('year', p_value) = 0 AND date_part('month', p_value) = 0
            AND date_part('day', p_value) * (extract(epoch FROM p_value) - date_part('day', p_value) * 86400) >= 0)
$$;
COMMENT ON FUNCTION jobq._fixed_length(interval) IS
    'True when an interval has no month or year part and its days and time have one sign (a true duration).';

CREATE FUNCTION jobq._check_interval(p_value interval, p_arg text, p_min interval, p_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ008 unless p_value is a duration (see _fixed_length) with
    -- p_min <= p_value <= p_max (NULL is allowed: the caller defaults it).
    IF p_value IS NOT NULL AND p_value NOT BETWEEN p_min AND p_max THEN
        RAISE EXCEPTION 'jobq: % must be between % and %, got %', p_arg, p_min, p_max, p_value
            USING ERRCODE = 'JQ008',
                  HINT = 'Pass NULL to use the queue''s setting.';
    END IF;
    IF NOT jobq._fixed_length(p_value) THEN
        RAISE EXCEPTION 'jobq: % must be a duration without months or years, its days and time of one sign, got %',
                p_arg, p_value
            USING ERRCODE = 'JQ008',
                  HINT = 'Write it in seconds, minutes, hours or days, e.g. interval ''30 minutes''; '
                         'a month is not a fixed length.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_interval(interval, text, interval, interval) IS
    'Raises JQ008 for an interval argument out of range, or not a fixed length (months, mixed signs).';

CREATE FUNCTION jobq._check_lease_args(p_id bigint, p_lease_token uuid) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ010 when the job id or its lease token is NULL.
    IF p_id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id of a job returned by jobq.claim().';
    END IF;
    IF p_lease_token IS NULL THEN
        RAISE EXCEPTION 'jobq: lease_token must not be NULL'
            USING ERRCODE = 'JQ010',
                  HINT = 'Pass the lease_token from the row jobq.claim() returned; it fences the lease. Operators use jobq.cancel() or jobq.retry().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_lease_args(bigint, uuid) IS 'Raises JQ010 for a NULL id or lease token.';

CREATE FUNCTION jobq._check_error(p_error text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ017 for a NULL error text: a failure records why.
    IF p_error IS NULL THEN
        RAISE EXCEPTION 'jobq: error must not be NULL'
            USING ERRCODE = 'JQ017',
                  HINT = 'Pass why the attempt failed, e.g. the exception and its traceback (an empty string is allowed).';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_error(text) IS 'Raises JQ017 for a NULL error text.';

CREATE FUNCTION jobq._check_worker(p_worker text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ011 for a worker name longer than 200 characters (NULL is allowed).
    IF char_length(p_worker) > 200 THEN
        RAISE EXCEPTION 'jobq: worker must be at most 200 characters, got %', char_length(p_worker)
            USING ERRCODE = 'JQ011', HINT = 'Use something like ''host:pid'' or NULL.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_worker(text) IS 'Raises JQ011 for an over-long worker name.';

CREATE FUNCTION jobq._check_periodic_name(p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ016 unless p_name is a valid periodic job name.
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.:-]{1,64}$' THEN
        RAISE EXCEPTION 'jobq: name must be 1 to 64 characters from [A-Za-z0-9_.:-], got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_name, 100)), 'NULL')
            USING ERRCODE = 'JQ016', HINT = 'Use names such as ''nightly-report''.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_periodic_name(text) IS 'Raises JQ016 for a NULL or badly spelled periodic job name.';

CREATE FUNCTION jobq._check_read_committed() RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ015 unless the transaction runs at READ COMMITTED: claim and
    -- take count running jobs and group heads after taking their locks, which
    -- needs a fresh snapshot per statement.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobq: claiming needs READ COMMITTED isolation, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'JQ015',
                  HINT = 'Claim in its own transaction, or SET TRANSACTION ISOLATION LEVEL READ COMMITTED.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_read_committed() IS 'Raises JQ015 outside READ COMMITTED isolation.';

CREATE FUNCTION jobq._check_dependencies(p_ids bigint[], p_arg text, p_on_parent_failure text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ018 unless p_ids (depends_on, members) is a list (one
    -- dimension, any lower bound: an element is named by its own subscript,
    -- lower bound + ordinality - 1) of at most 100,000 distinct job ids
    -- without NULL, and JQ017 unless
    -- p_on_parent_failure is 'cancel' or 'run'. Whether the ids are known is
    -- jobq._check_parents_issued's question.
    IF p_on_parent_failure IS NULL OR p_on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'jobq: on_parent_failure must be ''cancel'' or ''run'', got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_on_parent_failure, 100)), 'NULL')
            USING ERRCODE = 'JQ017',
                  HINT = '''cancel'' (the default) cancels the job when a parent is dead or cancelled; '
                         '''run'' runs it once every parent has finished, however.';
    END IF;
    IF p_ids IS NULL THEN
        RAISE EXCEPTION 'jobq: % must be an array of job ids, got NULL', p_arg
            USING ERRCODE = 'JQ018', HINT = 'Pass e.g. ARRAY[41, 42]::bigint[].';
    END IF;
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'jobq: % must be a one-dimensional array, got % dimensions %',
                p_arg, array_ndims(p_ids), array_dims(p_ids)
            USING ERRCODE = 'JQ018',
                  HINT = 'Pass a list of job ids, e.g. ARRAY[41, 42]::bigint[]; ARRAY(SELECT unnest(a)) flattens a '
                         'nested array a.';
    END IF;
    IF cardinality(p_ids) > 100000 THEN
        RAISE EXCEPTION 'jobq: % has % ids, over the cap of 100000', p_arg, cardinality(p_ids)
            USING ERRCODE = 'JQ018',
                  HINT = 'Make a tree: callbacks of up to 100000 jobs each, and one callback depending on those.';
    END IF;
    SELECT u.id, u.ord INTO v_bad
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
    WHERE u.id IS NULL
    ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: %[%] is NULL', p_arg, array_lower(p_ids, 1) + v_bad.ord - 1
            USING ERRCODE = 'JQ018', HINT = 'Pass the id of every job this one depends on, without NULL.';
    END IF;
    SELECT u.id, count(*) AS n INTO v_bad
    FROM unnest(p_ids) AS u(id)
    GROUP BY u.id HAVING count(*) > 1
    ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: % names job % % times', p_arg, v_bad.id, v_bad.n
            USING ERRCODE = 'JQ018', HINT = 'Name each job once, e.g. ARRAY(SELECT DISTINCT unnest(ids)).';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_dependencies(bigint[], text, text) IS
    'Raises JQ018 for a NULL, oversized, NULL-holding or repeating list of parent ids, JQ017 for a bad on_parent_failure.';

CREATE FUNCTION jobq._check_results(p_ids bigint[], p_results jsonb[]) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ010 unless p_results is a list that pairs with p_ids, and
    -- JQ003 for a result over its job's queue's max_payload_bytes (jobs not
    -- live are left to the completion, which ignores them).
    IF array_ndims(p_results) > 1 THEN
        RAISE EXCEPTION 'jobq: results must be a one-dimensional array, got % dimensions %',
                array_ndims(p_results), array_dims(p_results)
            USING ERRCODE = 'JQ010', HINT = 'Pass one result (or NULL) per job id, in a one-dimensional array.';
    END IF;
    IF cardinality(p_results) <> cardinality(p_ids) THEN
        RAISE EXCEPTION 'jobq: results has % elements but ids has %', cardinality(p_results), cardinality(p_ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass one result (or NULL) per job id, in the same order.';
    END IF;
    IF cardinality(array_remove(p_results, NULL)) = 0 THEN
        RETURN;
    END IF;
    SELECT r.id, r.ord, pg_column_size(r.result) AS size, (jobq._settings(j.queue)).max_payload_bytes AS cap
    INTO v_bad
    FROM unnest(p_ids, p_results) WITH ORDINALITY AS r(id, result, ord)
    JOIN jobq._job AS j ON j.id = r.id
    WHERE r.result IS NOT NULL AND pg_column_size(r.result) > (jobq._settings(j.queue)).max_payload_bytes
    ORDER BY r.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: the result of job % is % bytes, over the queue''s cap of % bytes', v_bad.id, v_bad.size, v_bad.cap
            USING ERRCODE = 'JQ003',
                  HINT = 'Store large results in a table and return its key, or raise max_payload_bytes with jobq.configure_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_results(bigint[], jsonb[]) IS
    'Raises JQ010 when results does not pair with ids, JQ003 for a result over its queue''s payload cap.';

---------------------------------------------------------------------------
-- 4a. per-queue privileges (opt-in): the checks of who may produce, consume or read where
---------------------------------------------------------------------------

CREATE FUNCTION jobq._caller() RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The role a call into jobq acts for: the role the session chose with
    -- SET ROLE (PostgreSQL checked the membership when it was set), else the
    -- login role. Not current_user, which inside jobq's SECURITY DEFINER
    -- functions is jobq's owner; and not session_user alone, which a
    -- session that dropped to a lesser role with SET ROLE would still be.
    RETURN CASE WHEN current_setting('role') = 'none' THEN session_user::text ELSE current_setting('role') END;
END
$$;
COMMENT ON FUNCTION jobq._caller() IS
    'The role a call acts for: the SET ROLE role, else the login role (per-queue privileges check it).';

CREATE FUNCTION jobq._denied_queue(p_queues text[], p_privilege text) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_caller oid := to_regrole(quote_ident(jobq._caller()));
BEGIN
    -- The first of p_queues on which the caller (jobq._caller()) may not
    -- p_privilege ('produce', 'consume' or 'read'); NULL when it may on all.
    -- It may where no grant of that privilege matches the queue (the
    -- role-level rules alone apply), where it has the privileges of the role
    -- of one that does (itself, a group role it inherits from, or the role
    -- it SET ROLE to), and everywhere as jobq_admin. A pattern matches the
    -- queue it names, or, ending in *, every queue whose name starts with
    -- what comes before the * (queue_like, its LIKE pattern). Grants of
    -- dropped roles still match, and nobody holds them (to_regrole: NULL).
    -- Membership is asked of the matching grants' roles only, however many
    -- roles the cluster has. PL/pgSQL, not SQL, and a generic plan: it is
    -- planned once per session (planning it costs more than running it).
    IF pg_has_role(v_caller, 'jobq_admin', 'USAGE') THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT q.name
            FROM unnest(p_queues) WITH ORDINALITY AS q(name, ord)
            WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                          WHERE g.privilege = p_privilege AND q.name LIKE g.queue_like)
              AND NOT EXISTS (SELECT FROM jobq._queue_grant AS g
                              WHERE g.privilege = p_privilege AND q.name LIKE g.queue_like
                                AND pg_has_role(v_caller, to_regrole(quote_ident(g.role)), 'USAGE'))
            ORDER BY q.ord
            LIMIT 1);
END
$$;
COMMENT ON FUNCTION jobq._denied_queue(text[], text) IS
    'The first queue on which the caller may not produce/consume/read (grants match it, it holds none, not jobq_admin); NULL when none.';

CREATE FUNCTION jobq._check_queue_privilege(p_queues text[], p_privilege text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text := jobq._denied_queue(p_queues, p_privilege);
BEGIN
    -- Raise JQ020 for the first of p_queues (valid names) on which the
    -- caller may not p_privilege (jobq._denied_queue). The public functions
    -- call it only when some grant of p_privilege matches one of the queues
    -- (one look at a small table, no function call): a queue that no grant
    -- matches costs nothing more.
    IF v_queue IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: role % lacks the % privilege on queue %',
                pg_catalog.quote_ident(jobq._caller()), p_privilege, pg_catalog.quote_literal(v_queue)
            USING ERRCODE = 'JQ020',
                  DETAIL = pg_catalog.format('Queue %L has per-queue %s grants (jobq.queue_grants): only their roles '
                                             '(and members) and jobq_admin may %s there.', v_queue, p_privilege, p_privilege),
                  HINT = pg_catalog.format('A jobq_admin can allow it: SELECT jobq.grant_queue(%L, %L, %L);',
                                           jobq._caller(), v_queue, p_privilege);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_queue_privilege(text[], text) IS
    'Raises JQ020 for the first queue on which the caller lacks a privilege (per-queue grants).';

CREATE FUNCTION jobq._job_allowed(p_id bigint, p_privilege text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Whether the caller may p_privilege on the queue of job p_id, live or
    -- finished (jobq._denied_queue). True while no grant of p_privilege
    -- exists (without reading the job), and for an id jobq does not know:
    -- the caller answers for those as for any unknown id, and so answers
    -- the same for a job it may not see, which cannot then be probed.
    IF NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = p_privilege) THEN
        RETURN true;
    END IF;
    SELECT j.queue INTO v_queue FROM jobq._job AS j WHERE j.id = p_id;
    IF NOT FOUND THEN
        SELECT a.queue INTO v_queue FROM jobq._job_archive AS a WHERE a.id = p_id;
    END IF;
    RETURN v_queue IS NULL OR jobq._denied_queue(ARRAY[v_queue], p_privilege) IS NULL;
END
$$;
COMMENT ON FUNCTION jobq._job_allowed(bigint, text) IS
    'Whether the caller may produce/consume/read on a job''s queue; true for unknown ids and while no such grant exists.';

CREATE FUNCTION jobq._check_readable_jobs(p_ids bigint[], p_arg text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Raise JQ019 for the lowest of p_ids (depends_on, a callback's members)
    -- that is a job of a queue the caller may not read, with the words
    -- jobq._check_parents_issued uses for an id jobq never issued: linking to a job
    -- needs the right to read it. Nothing while no read grant exists.
    IF NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read') THEN
        RETURN;
    END IF;
    SELECT u.id INTO v_id
    FROM unnest(p_ids) AS u(id)
    WHERE NOT jobq._job_allowed(u.id, 'read')
    ORDER BY u.id
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: % names job %, which does not exist', p_arg, v_id
            USING ERRCODE = 'JQ019', HINT = 'Pass ids that jobq.enqueue() returned.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_readable_jobs(bigint[], text) IS
    'Raises JQ019 (as for an id never issued) for a job of a queue the caller may not read.';

CREATE VIEW jobq._read_pattern AS
    -- The patterns of the read grants (queue_like: as LIKE patterns), each
    -- with whether the current user may read the queues it matches through
    -- it (it has the privileges of the grant's role, or of jobq_admin). The
    -- views filter their rows of read-restricted queues by it; as a view
    -- (not a function) it needs no EXECUTE, which jobq_viewer has on no
    -- private function.
    SELECT g.queue_pattern, g.queue_like,
           pg_catalog.pg_has_role('jobq_admin', 'USAGE') OR coalesce(pg_catalog.pg_has_role(r.oid, 'USAGE'), false)
               AS held
    FROM jobq._queue_grant AS g
    LEFT JOIN pg_catalog.pg_roles AS r ON r.rolname = g.role
    WHERE g.privilege = 'read';
COMMENT ON VIEW jobq._read_pattern IS
    'Read-grant patterns and whether the current user holds one (the views filter rows of read-restricted queues by it). Private.';

---------------------------------------------------------------------------
-- 4. private helpers
---------------------------------------------------------------------------

CREATE VIEW jobq._queue_defaults AS
    -- The built-in defaults of the queue settings, here and only here: a
    -- setting a queue does not override (NULL in jobq._queue) takes this.
    -- Settings absent here (dead_retention, concurrency, rate_limit,
    -- timeout) have none: NULL means no limit. A view, not a function, so
    -- that jobq.queues needs no function its readers (jobq_viewer) would
    -- have to be allowed to call.
    SELECT 25 AS max_attempts,
           interval '2 seconds' AS backoff_base,
           interval '1 hour' AS backoff_cap,
           0.25::double precision AS backoff_jitter,
           interval '5 minutes' AS lease,
           interval '0' AS retention,                -- completed jobs leave no history unless asked
           1048576 AS max_payload_bytes,
           interval '1 second' AS rate_interval,     -- the window of a rate limit
           false AS paused,
           interval '1 day' AS result_retention;     -- a completed job's result, at the least
COMMENT ON VIEW jobq._queue_defaults IS 'Built-in defaults of the queue settings (one row). Private: read jobq.queues.';

CREATE FUNCTION jobq._settings(p_queue text) RETURNS jobq._queue
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
BEGIN
    -- The effective settings of a queue: its overrides over the defaults
    -- (jobq._queue_defaults). (PL/pgSQL, not SQL: a SQL function with a SET
    -- clause is planned afresh on every call, and every enqueue, claim and
    -- completion asks for settings.)
    SELECT p_queue,
           coalesce(q.max_attempts, d.max_attempts),
           coalesce(q.backoff_base, d.backoff_base),
           coalesce(q.backoff_cap, d.backoff_cap),
           coalesce(q.backoff_jitter, d.backoff_jitter),
           coalesce(q.lease, d.lease),
           coalesce(q.retention, d.retention),
           q.dead_retention,                          -- NULL: dead and cancelled jobs stay until retried
           coalesce(q.max_payload_bytes, d.max_payload_bytes),
           coalesce(q.updated_at, '-infinity'::timestamptz),
           q.concurrency,                             -- NULL: no limit
           q.rate_limit,                              -- NULL: no limit
           CASE WHEN q.rate_limit IS NOT NULL THEN coalesce(q.rate_interval, d.rate_interval) END,
           coalesce(q.paused, d.paused),
           q.timeout,                                 -- NULL: handlers run as long as they take
           coalesce(q.result_retention, d.result_retention),
           coalesce(q.fair, false),                   -- fair: claimed round-robin across fair keys
           q.fair_weights,                            -- NULL: every key weight 1
           q.per_key_concurrency,                     -- NULL: no limit per key
           q.fair_cursor,
           q.fair_turns
    INTO v_settings
    FROM jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON q.queue = p_queue;
    RETURN v_settings;
END
$$;
COMMENT ON FUNCTION jobq._settings(text) IS 'Effective settings of a queue (overrides from jobq._queue over built-in defaults).';

CREATE FUNCTION jobq._backoff_delay(
    p_attempt integer, p_base interval, p_cap interval, p_jitter double precision, p_random double precision
) RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Delay after the p_attempt-th failure: min(base * 2^(attempt-1), cap)
    -- scaled by a jitter factor in [1 - jitter, 1] (p_random in [0, 1)).
    -- The exponent is clamped, so no attempt count can overflow.
    SELECT make_interval(secs =>
        least(extract(epoch FROM p_base)::double precision
                  * power(2::double precision, (least(greatest(p_attempt, 1), 64) - 1)::double precision),
              extract(epoch FROM p_cap)::double precision)
        * (1 - p_jitter * p_random))
$$;
COMMENT ON FUNCTION jobq._backoff_delay(integer, interval, interval, double precision, double precision)
    IS 'Backoff delay: min(base * 2^(attempt-1), cap) * (1 - jitter * random). Overflow-proof.';

CREATE FUNCTION jobq._history_kept() RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Whether any queue keeps completed jobs as history (retention over 0,
    -- by its own setting or by the default): when none does, finishing a
    -- completed job need not copy its row. (The default read from
    -- jobq._queue_defaults directly: no jobq._settings call per finish.)
    RETURN (SELECT d.retention FROM jobq._queue_defaults AS d) > interval '0'
        OR EXISTS (SELECT FROM jobq._queue AS q WHERE q.retention > interval '0');
END
$$;
COMMENT ON FUNCTION jobq._history_kept() IS 'Whether any queue keeps completed jobs in the archive (retention > 0).';

CREATE FUNCTION jobq._check_fair_key(p_key text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ009 unless p_key (named p_name) is NULL or a fair key of 1 to
    -- 512 characters ('' is jobq's own: the turn of the jobs without a key).
    IF p_key IS NOT NULL AND char_length(p_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'jobq: % must be 1 to 512 characters, got %', p_name, char_length(p_key)
            USING ERRCODE = 'JQ009', HINT = 'Use a short tenant or customer id, or NULL for no key.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_fair_key(text, text) IS 'Raises JQ009 for a fair key that is not NULL or 1 to 512 characters.';

CREATE FUNCTION jobq._check_fair_keys(p_fair_keys text[], p_n integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item record;
BEGIN
    -- Raise JQ009 unless p_fair_keys is a list of p_n fair keys (or NULLs);
    -- a bad key is named by its own subscript.
    IF array_ndims(p_fair_keys) > 1 THEN
        RAISE EXCEPTION 'jobq: fair_keys must be a one-dimensional array, got % dimensions %',
                array_ndims(p_fair_keys), array_dims(p_fair_keys)
            USING ERRCODE = 'JQ009', HINT = 'Pass a list of fair keys (or NULLs), one per payload.';
    END IF;
    IF cardinality(p_fair_keys) <> p_n THEN
        RAISE EXCEPTION 'jobq: fair_keys has % elements but payloads has %', cardinality(p_fair_keys), p_n
            USING ERRCODE = 'JQ009', HINT = 'Pass one fair key (or NULL) per payload, or fair_keys => NULL.';
    END IF;
    FOR v_item IN SELECT x.fair_key, x.ord FROM unnest(p_fair_keys) WITH ORDINALITY AS x(fair_key, ord) LOOP
        PERFORM jobq._check_fair_key(v_item.fair_key,
                                     format('fair_keys[%s]', array_lower(p_fair_keys, 1) + v_item.ord - 1));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_fair_keys(text[], integer) IS
    'Raises JQ009 for fair_keys that are not one fair key (or NULL) per payload, each NULL or 1 to 512 characters.';

CREATE FUNCTION jobq._check_fair_grouping(p_fair boolean, p_group_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ009 when a job of a serial group goes to a fair queue: a fair
    -- queue is claimed round-robin across its keys and keeps no group order.
    IF p_fair AND p_group_key IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: group_key cannot be used on a fair queue'
            USING ERRCODE = 'JQ009',
                  HINT = 'A fair queue serves its fair keys round-robin and has no serial groups: '
                         'use per_key_concurrency => 1 to run a key one job at a time, or another queue.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_fair_grouping(boolean, text) IS
    'Raises JQ009 for a group_key on a fair queue (fair queues have no serial groups).';

CREATE FUNCTION jobq._check_fair_weights(p_weights jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ012 unless p_weights is NULL or a JSON object of at most
    -- 10,000 fair keys (1 to 512 characters) to whole numbers 1 to 1000.
    IF p_weights IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_weights) <> 'object' THEN
        RAISE EXCEPTION 'jobq: setting fair_weights must be a JSON object, got a JSON %', jsonb_typeof(p_weights)
            USING ERRCODE = 'JQ012', HINT = 'Map fair keys to weights, e.g. ''{"gold": 3}''; ''{}'' removes them.';
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(p_weights)) > 10000 THEN
        RAISE EXCEPTION 'jobq: setting fair_weights has more than 10000 keys'
            USING ERRCODE = 'JQ012', HINT = 'Give weights to the few keys that need more turns; the rest have 1.';
    END IF;
    SELECT e.key, e.value INTO v_bad
    FROM jsonb_each(p_weights) AS e
    WHERE char_length(e.key) NOT BETWEEN 1 AND 512
       OR jsonb_typeof(e.value) <> 'number'
       OR e.value::text !~ '^[0-9]+$'
       OR e.value::text::numeric NOT BETWEEN 1 AND 1000
    LIMIT 1;
    IF FOUND THEN
        IF char_length(v_bad.key) NOT BETWEEN 1 AND 512 THEN
            RAISE EXCEPTION 'jobq: setting fair_weights has a key of % characters, which no fair key can be',
                    char_length(v_bad.key)
                USING ERRCODE = 'JQ012', HINT = 'Fair keys are 1 to 512 characters.';
        END IF;
        RAISE EXCEPTION 'jobq: setting fair_weights gives key % the weight %, not a whole number from 1 to 1000',
                pg_catalog.quote_literal(pg_catalog.left(v_bad.key, 100)), pg_catalog.left(v_bad.value::text, 100)
            USING ERRCODE = 'JQ012',
                  HINT = 'A weight is how many turns a key gets per round (1, the default, to 1000); '
                         'leave a key out for weight 1.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_fair_weights(jsonb) IS
    'Raises JQ012 unless fair_weights is NULL or an object of fair keys to whole-number weights 1..1000.';

CREATE FUNCTION jobq._fair_pick(p_queue text, p_n integer, p_settings jobq._queue, p_place boolean,
                                OUT ids bigint[], OUT parked boolean[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
AS $$
DECLARE
    v_ids bigint[] := '{}';
    v_parked boolean[] := '{}';
    v_got_parked boolean[];
    -- The window where leases may stay in place (jobq._fair_window): its
    -- priority and last job (NULL: none, every lease is parked).
    v_window bigint[];
    v_win_priority integer;
    v_win_run_at timestamptz;
    v_win_id bigint;
    -- Its half-way job, and whether this claim leased in place a job at or
    -- before it (then the head of the claim index is there too: no probe).
    v_half_run_at timestamptz;
    v_half_id bigint;
    v_early boolean := false;
    v_got_early boolean;
    v_head record;
    v_single boolean := false;   -- one key in the whole queue: leases in place, no window needed
    v_weights jsonb := coalesce(p_settings.fair_weights, '{}');
    v_limit integer := p_settings.per_key_concurrency;
    v_running jsonb := '{}';
    v_last text := p_settings.fair_cursor;
    v_used integer := coalesce(p_settings.fair_turns, 0);
    v_left integer;
    v_from text;
    v_want integer;
    v_keys text[];
    v_turns integer[];
    v_rounds integer;
    v_got bigint[];
    v_got_keys text[];
    v_got_used integer[];
    v_heads bigint[];   -- each key's first job in the fair index (ready or not), as the walk found it
    v_tids tid[];       -- where those rows were
    v_walk integer;     -- keys the walk looks for
BEGIN
    -- Row-lock (SKIP LOCKED) up to p_n ready jobs of the fair queue p_queue
    -- (p_settings: its settings), round-robin across its fair keys: the keys
    -- with due jobs in key order, starting from the cursor on the queue's
    -- row (the key served last: the key itself while it has turns of its
    -- round left, else the next one) and wrapping around; each key gives
    -- its weight's worth of jobs per round (fair_weights, else 1), in
    -- (priority, run_at, id) order, until p_n are taken. Keys that run out
    -- leave their turns to the others (work-conserving: a key alone gets all
    -- p_n). With per_key_concurrency, no key gets more than that many
    -- running: counted under the row lock of the queue's jobq._queue row
    -- (SKIP LOCKED, as for the queue's concurrency limit: a claimer that
    -- finds it taken gets no jobs, never a wait), in a statement after the
    -- lock. Keys come from a skip scan of jobq._job_fair_idx (one probe per
    -- key, never a sort of the backlog), each key's jobs from the same index
    -- (at most 8 passes of up to p_n keys: more keys in a row without a due
    -- job leave the rest to the next claim, which starts after them);
    -- plans pinned (no sort, bitmap or sequential scan, whatever the
    -- statistics). Returns the ids (ids, in no particular order) and which
    -- of them to park (parked, in the same order): with p_place, those
    -- outside the window of the claim index where jobq._leased_in_place is
    -- sure to find a lease in place (jobq._fair_window; the others may stay
    -- in place, a HOT update); without, all of them. Moves the cursor when
    -- it can lock the queue's row (a concurrent claim that cannot leaves it
    -- to the other).
    ids := '{}';
    parked := '{}';
    IF p_n <= 0 THEN
        RETURN;
    END IF;
    IF p_place THEN
        -- The session's window (jobq._fair_window keeps it in this setting),
        -- read here; jobq._fair_window only when there is none yet.
        v_window := string_to_array(nullif(current_setting('jobq.fair_window_' || md5(p_queue), true), ''),
                                    ' ')::bigint[];
        IF v_window IS NULL THEN
            v_window := jobq._fair_window(p_queue, false);
        END IF;
        v_win_priority := v_window[1];
        v_win_run_at := 'epoch'::timestamptz + v_window[2] * interval '1 microsecond';
        v_win_id := v_window[3];
        v_half_run_at := 'epoch'::timestamptz + v_window[4] * interval '1 microsecond';
        v_half_id := v_window[5];
    END IF;
    IF v_limit IS NOT NULL THEN
        PERFORM FROM jobq._queue AS q WHERE q.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;   -- another claimer is counting this queue's keys right now
        END IF;
        SELECT coalesce(jsonb_object_agg(r.fair_key, r.n), '{}') INTO v_running
        FROM (SELECT j.fair_key, count(*) AS n
              FROM jobq._job AS j
              WHERE j.queue = p_queue AND j.parked AND j.status = 'running' AND j.fair_key IS NOT NULL
              GROUP BY j.fair_key) AS r;
    END IF;
    FOR v_pass IN 1..8 LOOP
        v_want := p_n - cardinality(v_ids);
        EXIT WHEN v_want <= 0;
        -- Where this pass starts: at the cursor's key while it has turns of
        -- its round left (v_left), else at the smallest string after it in
        -- the key's "C" order ('' from the very start).
        v_left := coalesce((v_weights ->> v_last)::integer, 1) - v_used;
        IF v_last IS NOT NULL AND v_left > 0 THEN
            v_from := v_last;
        ELSE
            v_from := coalesce(v_last || chr(1), '');
            v_left := 0;
        END IF;
        -- Up to v_want keys with jobs not running (and, with a limit, a
        -- free slot), in turn order: from v_from to the last key, then from
        -- the first key up to v_from. The order is that of the scans (UNION
        -- ALL appends the second after the first); no sort. A key's turns
        -- per round: its weight (and no more than its free slots). Whether
        -- a key has a due job is found by taking it (a key whose jobs are
        -- all scheduled gives none). Each probe lands on the key's first
        -- entry in the fair index, its most urgent job (v_heads, v_tids):
        -- the job a turn of one takes when it is ready and due. For a turn
        -- of one job, the walk looks for a second key too: whether the
        -- queue has any other key (v_single, below).
        v_walk := CASE WHEN v_want = 1 THEN 2 ELSE v_want END;
        WITH RECURSIVE upper_keys(key, id, tid) AS (
            (SELECT j.fair_key, j.id, j.ctid FROM jobq._job AS j
             WHERE j.queue = p_queue AND j.fair_key >= v_from AND NOT j.parked
             ORDER BY j.fair_key, j.priority, j.run_at, j.id LIMIT 1)
            UNION ALL
            SELECT n.fair_key, n.id, n.ctid
            FROM upper_keys AS u,
                 LATERAL (SELECT j.fair_key, j.id, j.ctid FROM jobq._job AS j
                          WHERE j.queue = p_queue AND j.fair_key > u.key AND NOT j.parked
                          ORDER BY j.fair_key, j.priority, j.run_at, j.id LIMIT 1) AS n
        ), lower_keys(key, id, tid) AS (
            (SELECT j.fair_key, j.id, j.ctid FROM jobq._job AS j
             WHERE j.queue = p_queue AND j.fair_key >= '' AND j.fair_key < v_from AND NOT j.parked
             ORDER BY j.fair_key, j.priority, j.run_at, j.id LIMIT 1)
            UNION ALL
            SELECT n.fair_key, n.id, n.ctid
            FROM lower_keys AS l,
                 LATERAL (SELECT j.fair_key, j.id, j.ctid FROM jobq._job AS j
                          WHERE j.queue = p_queue AND j.fair_key > l.key AND j.fair_key < v_from AND NOT j.parked
                          ORDER BY j.fair_key, j.priority, j.run_at, j.id LIMIT 1) AS n
        )
        SELECT array_agg(k.key), array_agg(k.turn), array_agg(k.id), array_agg(k.tid)
        INTO v_keys, v_turns, v_heads, v_tids
        FROM (SELECT a.key, a.id, a.tid,
                     least(coalesce((v_weights ->> a.key)::integer, 1),
                           coalesce(v_limit - coalesce((v_running ->> a.key)::integer, 0), 1000)) AS turn
              FROM (SELECT u.key, u.id, u.tid FROM upper_keys AS u
                    UNION ALL
                    SELECT l.key, l.id, l.tid FROM lower_keys AS l) AS a
              WHERE (v_limit IS NULL OR coalesce((v_running ->> a.key)::integer, 0) < v_limit)
              LIMIT v_walk) AS k;
        EXIT WHEN v_keys IS NULL;
        IF v_keys[1] IS DISTINCT FROM v_from THEN
            v_left := 0;   -- the cursor's key has no job now: its round is over
        END IF;
        IF v_weights = '{}' AND v_limit IS NULL AND cardinality(v_keys) = 1 THEN
            -- The rotation found one key in all (fewer than it looked for):
            -- the queue has no other key, so its order is the claim
            -- index's, and its leases stay in place as a plain claim's do,
            -- at the head.
            v_single := p_place AND v_pass = 1 AND v_window IS NOT NULL;
        END IF;
        IF cardinality(v_keys) > v_want THEN
            v_keys := v_keys[1:v_want];
            v_turns := v_turns[1:v_want];
            v_heads := v_heads[1:v_want];
            v_tids := v_tids[1:v_want];
        END IF;
        IF v_weights = '{}' AND v_limit IS NULL AND cardinality(v_keys) >= v_want THEN
            -- At least v_want keys (every turn 1, no limit): one round, the
            -- most urgent due job of each key (no window, no sort of the
            -- jobs taken). A key's first entry (v_heads) is that job when it
            -- is ready, due and free: first lock them where the walk found
            -- them, in one small statement: a TID scan, no second index
            -- descent per key (no condition but the TIDs can find the rows,
            -- so no index serves, whatever the statistics say; a ready job
            -- is never parked). The ids are checked after the lock (OFFSET
            -- 0 keeps that check out of the scan), should a slot hold
            -- another row by now. When every key's first job was taken,
            -- that is the round.
            SELECT array_agg(t.id), array_agg(t.park), bool_or(t.early)
            INTO v_got, v_got_parked, v_got_early
            FROM (SELECT t.id,
                         coalesce(NOT (t.priority = v_win_priority
                                       AND (t.run_at, t.id) <= (v_win_run_at, v_win_id)), true) AND NOT v_single
                             AS park,
                         coalesce(t.priority = v_win_priority
                                  AND (t.run_at, t.id) <= (v_half_run_at, v_half_id), false) AS early
                  FROM jobq._job AS t
                  WHERE t.ctid = ANY (v_tids) AND t.status = 'ready' AND t.run_at <= now() AND t.id <> ALL (v_ids)
                  OFFSET 0
                  FOR UPDATE SKIP LOCKED) AS t
            WHERE t.id = ANY (v_heads);
            IF cardinality(v_got) = cardinality(v_keys) THEN
                v_got_keys := v_keys;
                v_got_used := array_fill(1, ARRAY[cardinality(v_keys)]);
            ELSE
                -- Else the other keys look further in the fair index (a locking
                -- scan of their jobs: the first entry of a key that has none
                -- free, or one another claim holds, leads nowhere); the first
                -- jobs locked above are locked again (a row this transaction
                -- holds is not skipped), and all come in turn order.
                WITH locked AS MATERIALIZED (
                    SELECT t.id,
                           coalesce(NOT (t.priority = v_win_priority
                                         AND (t.run_at, t.id) <= (v_win_run_at, v_win_id)), true) AS park,
                           coalesce(t.priority = v_win_priority
                                    AND (t.run_at, t.id) <= (v_half_run_at, v_half_id), false) AS early
                    FROM jobq._job AS t
                    WHERE t.ctid = ANY (v_tids) AND t.status = 'ready' AND t.run_at <= now()
                      AND t.id <> ALL (v_ids)
                    OFFSET 0
                    FOR UPDATE SKIP LOCKED
                )
                SELECT array_agg(x.id ORDER BY k.pos), array_agg(k.key ORDER BY k.pos), array_agg(1),
                       array_agg(x.park AND NOT v_single ORDER BY k.pos), bool_or(x.early)
                INTO v_got, v_got_keys, v_got_used, v_got_parked, v_got_early
                FROM unnest(v_keys, v_heads) WITH ORDINALITY AS k(key, head, pos)
                     LEFT JOIN locked AS h ON h.id = k.head
                     CROSS JOIN LATERAL (
                         SELECT h.id, h.park, h.early
                         WHERE h.id IS NOT NULL
                         UNION ALL
                         SELECT f.id, f.park, f.early
                         FROM (SELECT j.id,
                                      coalesce(NOT (j.priority = v_win_priority
                                                    AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)), true) AS park,
                                      coalesce(j.priority = v_win_priority
                                               AND (j.run_at, j.id) <= (v_half_run_at, v_half_id), false) AS early
                               FROM jobq._job AS j
                               WHERE h.id IS NULL AND j.queue = p_queue AND j.fair_key = k.key AND NOT j.parked
                                 AND j.status = 'ready' AND j.run_at <= now() AND j.id <> ALL (v_ids)
                               ORDER BY j.priority, j.run_at, j.id
                               LIMIT 1
                               FOR UPDATE SKIP LOCKED) AS f) AS x;
            END IF;
        ELSIF v_weights = '{}' AND v_limit IS NULL AND cardinality(v_keys) = 1 THEN
            -- One key (every turn 1, no limit), fewer than v_want: its
            -- v_want most urgent due jobs, one index scan.
            SELECT array_agg(l.id), array_fill(v_keys[1], ARRAY[count(*)::integer]),
                   array_fill(1, ARRAY[count(*)::integer]), array_agg(l.park AND NOT v_single), bool_or(l.early)
            INTO v_got, v_got_keys, v_got_used, v_got_parked, v_got_early
            FROM (SELECT j.id, coalesce(NOT (j.priority = v_win_priority
                                             AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)), true) AS park,
                         coalesce(j.priority = v_win_priority
                                  AND (j.run_at, j.id) <= (v_half_run_at, v_half_id), false) AS early
                  FROM jobq._job AS j
                  WHERE j.queue = p_queue AND j.fair_key = v_keys[1] AND NOT j.parked
                    AND j.status = 'ready' AND j.run_at <= now() AND j.id <> ALL (v_ids)
                  ORDER BY j.priority, j.run_at, j.id
                  LIMIT v_want
                  FOR UPDATE SKIP LOCKED) AS l;
        ELSE
            -- Enough whole rounds for v_want jobs; a key's quota is its turns
            -- per round times the rounds, capped by its free slots under a limit.
            IF v_weights = '{}' AND v_limit IS NULL THEN
                v_rounds := ceil(v_want::numeric / cardinality(v_turns))::integer;   -- every turn is 1: no query
            ELSE
                v_rounds := ceil(v_want::numeric / (SELECT sum(t) FROM unnest(v_turns) AS t))::integer;
            END IF;
            -- Each key's most urgent due jobs (row-locked, SKIP LOCKED), served
            -- round by round: round r takes the r-th batch of turn jobs of every
            -- key, keys in turn order (the cursor's key, when it goes on, first
            -- takes the turns it has left); the first v_want of that order, and
            -- for each the turns of its round its key has had with it.
            SELECT array_agg(c.id), array_agg(c.key), array_agg(c.used), array_agg(c.park), bool_or(c.early)
            INTO v_got, v_got_keys, v_got_used, v_got_parked, v_got_early
            FROM (SELECT x.id, k.key,
                         CASE WHEN k.pos = 1 AND v_left > 0 AND x.ord <= least(v_left, k.turn) THEN 0
                              WHEN k.pos = 1 AND v_left > 0 THEN 1 + (x.ord - least(v_left, k.turn) - 1) / k.turn
                              ELSE (x.ord - 1) / k.turn END AS round,
                         CASE WHEN k.pos = 1 AND v_left > 0 AND x.ord <= least(v_left, k.turn)
                                  THEN k.turn - least(v_left, k.turn) + x.ord
                              WHEN k.pos = 1 AND v_left > 0 THEN (x.ord - least(v_left, k.turn) - 1) % k.turn + 1
                              ELSE (x.ord - 1) % k.turn + 1 END AS used,
                         k.pos, x.ord, x.park, x.early
                  FROM unnest(v_keys, v_turns) WITH ORDINALITY AS k(key, turn, pos),
                       LATERAL (SELECT l.id, l.park, l.early, row_number() OVER () AS ord
                                FROM (SELECT j.id,
                                             coalesce(NOT (j.priority = v_win_priority
                                                           AND (j.run_at, j.id) <= (v_win_run_at, v_win_id)),
                                                      true) AS park,
                                             coalesce(j.priority = v_win_priority
                                                      AND (j.run_at, j.id) <= (v_half_run_at, v_half_id),
                                                      false) AS early
                                      FROM jobq._job AS j
                                      WHERE j.queue = p_queue AND j.fair_key = k.key AND NOT j.parked
                                        AND j.status = 'ready' AND j.run_at <= now() AND j.id <> ALL (v_ids)
                                      ORDER BY j.priority, j.run_at, j.id
                                      LIMIT least(k.turn * v_rounds,
                                                  coalesce(v_limit - coalesce((v_running ->> k.key)::integer, 0),
                                                           k.turn * v_rounds))
                                      FOR UPDATE SKIP LOCKED) AS l) AS x
                  ORDER BY 3, k.pos, x.ord
                  LIMIT v_want) AS c;
        END IF;
        IF v_got IS NULL THEN
            -- None of these keys had a due job free (only scheduled ones, or
            -- locked by other claims): the whole rotation when it was all
            -- of it; else they lose this turn, and the next pass goes on
            -- after them.
            EXIT WHEN cardinality(v_keys) < v_want;
            v_last := v_keys[cardinality(v_keys)];
            v_used := coalesce((v_weights ->> v_last)::integer, 1);
            CONTINUE;
        END IF;
        v_ids := v_ids || v_got;
        v_parked := v_parked || v_got_parked;
        v_early := v_early OR coalesce(v_got_early, false);
        v_last := v_got_keys[cardinality(v_got_keys)];
        v_used := v_got_used[cardinality(v_got_used)];
        IF v_limit IS NOT NULL THEN
            SELECT v_running || coalesce(jsonb_object_agg(g.key, coalesce((v_running ->> g.key)::integer, 0) + g.n),
                                         '{}')
            INTO v_running
            FROM (SELECT u.key, count(*) AS n FROM unnest(v_got_keys) AS u(key) GROUP BY u.key) AS g;
        END IF;
    END LOOP;
    IF (v_last, v_used) IS DISTINCT FROM (p_settings.fair_cursor, p_settings.fair_turns) THEN
        -- One statement: lock the queue's row (SKIP LOCKED), then move the cursor.
        UPDATE jobq._queue AS q SET fair_cursor = v_last, fair_turns = v_used
        FROM (SELECT l.queue FROM jobq._queue AS l WHERE l.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED) AS l
        WHERE q.queue = l.queue;
    END IF;
    ids := v_ids;
    parked := v_parked;
    IF p_place AND v_window IS NOT NULL AND NOT v_single AND NOT v_early THEN
        -- Read the window again for the next claims once the head of the
        -- claim index has passed its half-way job (one probe; at most c_step
        -- index entries per c_step / 2 jobs claimed), so that claims keep
        -- taking jobs inside it. Not when this claim leased in place a job
        -- at or before the half-way job (v_early): that lease is an entry of
        -- the claim index, so the head is at or before it.
        SELECT j.run_at, j.id INTO v_head
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.priority = v_win_priority AND j.run_at <= now()
        ORDER BY j.run_at, j.id
        LIMIT 1;
        IF NOT FOUND OR (v_head.run_at, v_head.id) > (v_half_run_at, v_half_id) THEN
            PERFORM jobq._fair_window(p_queue, true);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._fair_pick(text, integer, jobq._queue, boolean) IS
    'Row-locks up to n ready jobs of a fair queue, round-robin across its fair keys from the cursor (weights, per_key_concurrency honoured), and which to park.';

CREATE FUNCTION jobq._fair_window(p_queue text, p_refresh boolean) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    -- As jobq._leased_in_place: its walk reads a queue's due jobs this many at a time.
    c_step CONSTANT integer := 1000;
    -- Where this session keeps a queue's window: a setting per queue.
    v_name text := 'jobq.fair_window_' || md5(p_queue);
    v_window bigint[];
    v_priority integer := -32769;
    v_edge record;
BEGIN
    -- The window of p_queue's claim index in which a fair claim may lease
    -- in place (jobq._fair_pick): the jobs jobq._leased_in_place is sure to
    -- find, the first c_step due jobs of the most urgent priority that has
    -- due jobs (the first step of its walk). As {priority, the last job's
    -- run_at (microseconds since 1970) and id, the half-way job's run_at
    -- and id}; NULL when the queue has no due job. Kept in this session (a
    -- setting per queue) and read from the index again when there is none
    -- or p_refresh: at most c_step index entries.
    IF NOT p_refresh THEN
        v_window := string_to_array(nullif(current_setting(v_name, true), ''), ' ')::bigint[];
        IF v_window IS NOT NULL THEN
            RETURN v_window;
        END IF;
    END IF;
    LOOP
        SELECT j.priority INTO v_priority
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.priority > v_priority
        ORDER BY j.priority
        LIMIT 1;
        EXIT WHEN NOT FOUND;
        -- In index order (the scan's; no sort).
        SELECT array_agg(h.run_at) AS run_ats, array_agg(h.id) AS ids
        INTO v_edge
        FROM (SELECT j.run_at, j.id
              FROM jobq._job AS j
              WHERE j.queue = p_queue AND j.priority = v_priority AND NOT j.parked AND j.run_at <= now()
              ORDER BY j.run_at, j.id
              LIMIT c_step) AS h;
        IF v_edge.ids IS NOT NULL THEN
            v_window := ARRAY[v_priority,
                              (extract(epoch FROM v_edge.run_ats[cardinality(v_edge.ids)]) * 1000000)::bigint,
                              v_edge.ids[cardinality(v_edge.ids)],
                              (extract(epoch FROM v_edge.run_ats[(cardinality(v_edge.ids) + 1) / 2]) * 1000000)::bigint,
                              v_edge.ids[(cardinality(v_edge.ids) + 1) / 2]];
            EXIT;
        END IF;
    END LOOP;
    PERFORM set_config(v_name, coalesce(array_to_string(v_window, ' '), ''), false);
    RETURN v_window;
END
$$;
COMMENT ON FUNCTION jobq._fair_window(text, boolean) IS
    'Where a fair claim may lease in place: the first 1,000 due jobs of the claim index (the first step of jobq._leased_in_place''s walk), kept per session.';

CREATE FUNCTION jobq._finish_lean(p_ids bigint[], p_lease_tokens uuid[], p_held boolean,
                                  OUT ids bigint[], OUT wake text[], OUT parents bigint[], OUT watched bigint[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_limited text[];
    v_rare jsonb;   -- the deleted jobs with side rows, dependents or watchers
    v_keyed_ids bigint[];
    v_keyed_queues text[];
    v_keys text[];
    v_erred bigint[];
    v_children bigint[];
    v_now timestamptz := clock_timestamp();
BEGIN
    -- jobq._finish's common case, lean: completed jobs without results
    -- while no queue keeps history, so the rows are deleted, not copied.
    -- Their side rows go with them (error history, edges and gates), a
    -- job_key records its completion in jobq._key_done, and each is
    -- counted. Returns the ids that left, the queues to wake (serial
    -- groups, concurrency limits), and the parents and watched jobs among
    -- them. Rows go in id order. One statement deletes, counts (one
    -- counter row per queue) and finds the queues to wake.
    WITH gone AS (
        DELETE FROM jobq._job AS j
        USING (SELECT u.* FROM unnest(p_ids, p_lease_tokens) AS u(id, lease_token) ORDER BY u.id) AS f
        WHERE j.id = f.id
          AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
          AND (NOT p_held OR j.status = 'ready')
        RETURNING j.id, j.queue, j.group_key, j.job_key, j.last_error IS NOT NULL AS erred,
                  j.has_children, j.has_parents, j.watched
    ), counted AS (
        INSERT INTO jobq._counter (queue, bucket, completed)
        SELECT g.queue, date_trunc('minute', now()), count(*) FROM gone AS g GROUP BY g.queue
        RETURNING queue
    )
    SELECT array_agg(g.id),
           jsonb_agg(g) FILTER (WHERE g.group_key IS NOT NULL OR g.job_key IS NOT NULL OR g.erred
                                   OR g.has_children OR g.has_parents OR g.watched),
           ARRAY(SELECT q.queue FROM jobq._queue AS q
                 WHERE q.queue IN (SELECT c.queue FROM counted AS c) AND q.concurrency IS NOT NULL)
    INTO ids, v_rare, v_limited
    FROM gone AS g;
    IF v_rare IS NOT NULL THEN
        -- Jobs with more to them (a serial group, a job_key, an error
        -- history, dependents, parents, a watcher): the common case never
        -- builds these arrays.
        SELECT array_agg(DISTINCT r.queue) FILTER (WHERE r.group_key IS NOT NULL),
               array_agg(r.id) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.queue) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.job_key) FILTER (WHERE r.job_key IS NOT NULL),
               array_agg(r.id) FILTER (WHERE r.erred),
               array_agg(r.id) FILTER (WHERE r.has_children),
               array_agg(r.id) FILTER (WHERE r.has_parents),
               array_agg(r.id) FILTER (WHERE r.watched)
        INTO wake, v_keyed_ids, v_keyed_queues, v_keys, v_erred, parents, v_children, watched
        FROM jsonb_to_recordset(v_rare) AS r(id bigint, queue text, group_key text, job_key text, erred boolean,
                                             has_children boolean, has_parents boolean, watched boolean);
    END IF;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    IF v_erred IS NOT NULL THEN
        -- Only jobs that failed before have an error history to delete
        -- (the common case never opens jobq._job_error).
        DELETE FROM jobq._job_error AS e WHERE e.job_id = ANY (v_erred);
    END IF;
    IF v_children IS NOT NULL THEN
        -- Jobs that depended on others, gone without history: so are their edges and gates.
        DELETE FROM jobq._job_dep AS d WHERE d.child_id = ANY (v_children);
        DELETE FROM jobq._job_wait AS w WHERE w.job_id = ANY (v_children);
    END IF;
    IF v_keys IS NOT NULL THEN
        -- A separate statement, so that finishing jobs without keys (the
        -- common case) never opens jobq._key_done.
        INSERT INTO jobq._key_done AS k (queue, job_key, job_id, finished_at)
        SELECT u.queue, u.job_key, u.id, v_now FROM unnest(v_keyed_queues, v_keys, v_keyed_ids) AS u(queue, job_key, id)
        ON CONFLICT (queue, job_key) DO UPDATE SET job_id = excluded.job_id, finished_at = excluded.finished_at;
    END IF;
    wake := wake || v_limited;
END
$$;
COMMENT ON FUNCTION jobq._finish_lean(bigint[], uuid[], boolean) IS
    'jobq._finish when nothing is kept: deletes completed jobs and their side rows, counts them, records their job_key.';

CREATE FUNCTION jobq._finish_kept(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
                                  p_held boolean, p_results jsonb[], p_cause bigint,
                                  OUT ids bigint[], OUT wake text[], OUT parents bigint[], OUT watched bigint[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    -- jobq._finish's general case, in one statement: the jobs leave the
    -- live table as p_status and go to the archive when kept (dead and
    -- cancelled always, with p_error or their last error; completed ones
    -- when their queue's retention is over 0 or they carry a result from
    -- p_results, kept for at least result_retention); those not kept take
    -- their error history, edges and gates along; a job_key records its
    -- completion; completed and dead jobs are counted. Returns the ids that
    -- left, the queues to wake, and the parents and watched jobs among them.
    WITH gone AS (
        DELETE FROM jobq._job AS j
        USING (SELECT u.* FROM unnest(p_ids, p_lease_tokens, p_results) AS u(id, lease_token, result)
               ORDER BY u.id) AS f
        WHERE j.id = f.id
          AND (f.lease_token IS NULL OR j.lease_token = f.lease_token)
          AND (NOT p_held OR j.status = 'ready')
        RETURNING j.*, CASE WHEN p_status = 'completed' THEN f.result END AS result
    ), settings AS (
        SELECT s.*
        FROM (SELECT DISTINCT g.queue FROM gone AS g) AS q,
             LATERAL jobq._settings(q.queue) AS s
    ), kept AS (
        INSERT INTO jobq._job_archive
            (id, queue, payload, status, priority, run_at, attempts, max_attempts,
             job_key, worker, last_error, created_at, started_at, finished_at, prune_after, group_key, timeout,
             result, cancelled_by, meta, fair_key)
        SELECT g.id, g.queue, g.payload, p_status, g.priority, g.run_at, g.attempts + p_held::integer,
               g.max_attempts, g.job_key, CASE WHEN p_held THEN session_user ELSE g.worker END,
               coalesce(p_error, g.last_error), g.created_at,
               CASE WHEN p_held THEN v_now ELSE g.started_at END,
               v_now, v_now + CASE WHEN p_status <> 'completed' THEN s.dead_retention
                                   WHEN g.result IS NOT NULL THEN greatest(s.retention, s.result_retention)
                                   ELSE s.retention END,
               g.group_key, g.timeout, g.result, p_cause, g.meta, g.fair_key
        FROM gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE p_status <> 'completed' OR s.retention > interval '0' OR g.result IS NOT NULL
    ), forgotten AS (
        -- Completed jobs the history does not keep take their errors along.
        DELETE FROM jobq._job_error AS e
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE e.job_id = g.id AND g.last_error IS NOT NULL
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), unlinked AS (
        -- ... and their edges and gates, when they depended on others.
        DELETE FROM jobq._job_dep AS d
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE d.child_id = g.id AND g.has_parents
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w
        USING gone AS g
        JOIN settings AS s ON s.queue = g.queue
        WHERE w.job_id = g.id AND g.has_parents
          AND p_status = 'completed' AND s.retention <= interval '0' AND g.result IS NULL
    ), keyed AS (
        INSERT INTO jobq._key_done AS k (queue, job_key, job_id, finished_at)
        SELECT g.queue, g.job_key, g.id, v_now FROM gone AS g
        WHERE p_status = 'completed' AND g.job_key IS NOT NULL
        ON CONFLICT (queue, job_key) DO UPDATE SET job_id = excluded.job_id, finished_at = excluded.finished_at
    ), counted AS (
        INSERT INTO jobq._counter (queue, bucket, completed, dead)
        SELECT g.queue, date_trunc('minute', now()),
               count(*) FILTER (WHERE p_status = 'completed'), count(*) FILTER (WHERE p_status = 'dead')
        FROM gone AS g
        WHERE p_status IN ('completed', 'dead')
        GROUP BY g.queue
    )
    SELECT array_agg(g.id),
           array_agg(DISTINCT g.queue) FILTER (WHERE g.group_key IS NOT NULL OR s.concurrency IS NOT NULL),
           array_agg(g.id) FILTER (WHERE g.has_children),
           array_agg(g.id) FILTER (WHERE g.watched)
    INTO ids, wake, parents, watched
    FROM gone AS g
    JOIN settings AS s ON s.queue = g.queue;
END
$$;
COMMENT ON FUNCTION jobq._finish_kept(bigint[], uuid[], text, text, boolean, jsonb[], bigint) IS
    'jobq._finish in general: moves jobs to the archive as they end (or deletes them), with their side rows and counts.';

CREATE FUNCTION jobq._finish(p_ids bigint[], p_lease_tokens uuid[], p_status text, p_error text,
                             p_held boolean DEFAULT false, p_results jsonb[] DEFAULT NULL,
                             p_cause bigint DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_ids bigint[];
    v_wake text[];
    v_parents bigint[];
    v_watched bigint[];
    v_lean record;
BEGIN
    -- Take live jobs out of the live table as p_status (completed, dead or
    -- cancelled). A non-NULL lease token fences: the job must still be held
    -- under exactly that lease. p_held: jobs the caller's transaction holds
    -- without a lease (take, hold): they must be unleased, and this
    -- transaction is their attempt. Every job is counted (one counter row per
    -- queue); history keeps dead and cancelled jobs, and completed ones when
    -- their queue's retention is over 0 (jobq._finish_kept; when nothing is
    -- kept, jobq._finish_lean). A completed job with a job_key records its
    -- completion in jobq._key_done (for enqueue's unique_for). Finishing a
    -- serial-group job or a job of a concurrency-limited queue frees a slot,
    -- so it wakes that queue's workers. A job that leaves no history takes
    -- its error history (jobq._job_error) with it; only a job that failed
    -- before (last_error set) has any. Rows go in id order (as
    -- jobq._settle_at_commit locks parents: no deadlock with an enqueue of
    -- their children). p_results (paired with p_ids): what completed jobs
    -- report; a job with a result is kept for at least its queue's
    -- result_retention. A job others depend on (has_children) updates their
    -- gates (jobq._finish_dependents); a job that depended on others and
    -- leaves no history takes its edges along. p_cause: the root ancestor of
    -- a cascade cancelling these jobs (recorded as cancelled_by; the caller,
    -- jobq._finish_dependents, then handles their dependents itself). A
    -- watched job (jobq.watch) sends NOTIFY jobq_finished with its id. A job
    -- kept in history keeps its gate, so a retry goes through it again.
    -- Returns the ids that left the live table. Its statements take jobs
    -- by id: planned once per session (generic plans), on index paths only,
    -- so that a plan made while the table held a few rows (a hash join over
    -- a sequential scan of it) does not scan a backlog that arrived since.
    IF p_held THEN
        -- Only jobs this transaction holds (or nobody does): a job another
        -- transaction holds is skipped, never waited for.
        p_ids := ARRAY(SELECT j.id FROM jobq._job AS j
                       WHERE j.id = ANY (p_ids) AND j.status = 'ready'
                       FOR UPDATE SKIP LOCKED);
    END IF;
    IF p_status = 'completed' AND coalesce(cardinality(array_remove(p_results, NULL)), 0) = 0
       AND NOT jobq._history_kept() THEN
        -- An assignment, not a query: a simple expression costs no executor start.
        v_lean := jobq._finish_lean(p_ids => p_ids, p_lease_tokens => p_lease_tokens, p_held => p_held);
        v_ids := v_lean.ids;
        v_wake := v_lean.wake;
        v_parents := v_lean.parents;
        v_watched := v_lean.watched;
    ELSE
        SELECT f.ids, f.wake, f.parents, f.watched INTO v_ids, v_wake, v_parents, v_watched
        FROM jobq._finish_kept(p_ids => p_ids, p_lease_tokens => p_lease_tokens, p_status => p_status,
                               p_error => p_error, p_held => p_held, p_results => p_results,
                               p_cause => p_cause) AS f;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF current_setting('jobq.named_jobs', true) = 'on' THEN
        -- This transaction named live jobs (depends_on, members, watch)
        -- whose flags wait for its commit (jobq._settle_at_commit): those
        -- it finishes itself are acted on as if flagged already.
        SELECT ARRAY(SELECT DISTINCT u.id FROM unnest(v_parents || n.parents) AS u(id)),
               ARRAY(SELECT DISTINCT u.id FROM unnest(v_watched || n.watched) AS u(id))
        INTO v_parents, v_watched
        FROM (SELECT ARRAY(SELECT p.id FROM jobq._at_commit AS c, unnest(c.parents) AS p(id)
                           WHERE c.xact = pg_current_xact_id() AND p.id = ANY (v_ids)) AS parents,
                     ARRAY(SELECT w.id FROM jobq._at_commit AS c, unnest(c.watched) AS w(id)
                           WHERE c.xact = pg_current_xact_id() AND w.id = ANY (v_ids)) AS watched) AS n;
    END IF;
    IF cardinality(v_watched) > 0 THEN
        PERFORM pg_notify('jobq_finished', w.id::text) FROM unnest(v_watched) AS w(id);
    END IF;
    IF cardinality(v_parents) > 0 AND p_cause IS NULL THEN
        PERFORM jobq._finish_dependents(v_parents, p_status);
    END IF;
    IF cardinality(v_wake) > 0 THEN
        PERFORM pg_notify('jobq', w.queue) FROM (SELECT DISTINCT u.queue FROM unnest(v_wake) AS u(queue)) AS w;
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq._finish(bigint[], uuid[], text, text, boolean, jsonb[], bigint) IS
    'Deletes live jobs (fenced by lease token, or held by this transaction), counts them, keeps the history and results they need, and updates their dependents.';

CREATE FUNCTION jobq._fold_counters() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Fold the per-statement counter rows into one row per queue and minute;
    -- rows older than a day into one row per queue at -infinity. Each folder
    -- folds the rows it could lock (SKIP LOCKED: concurrent folders split
    -- the rows, never wait, never count one twice, and the next fold merges
    -- what they left); rows committed meanwhile wait for the next. Row locks
    -- and not an advisory lock, which any role could hold to stop folding.
    WITH counted AS (
        SELECT c.ctid AS row_id, c.queue, c.bucket AS was,
               CASE WHEN c.bucket < now() - interval '1 day' THEN '-infinity'::timestamptz ELSE c.bucket END AS bucket
        FROM jobq._counter AS c
        FOR UPDATE SKIP LOCKED
    ), crowded AS (
        SELECT k.queue, k.bucket
        FROM counted AS k
        GROUP BY k.queue, k.bucket
        HAVING count(*) > 1 OR bool_or(k.was <> k.bucket)
    ), gone AS (
        DELETE FROM jobq._counter AS c
        USING counted AS k
        JOIN crowded AS w ON w.queue = k.queue AND w.bucket = k.bucket
        WHERE c.ctid = k.row_id
        RETURNING k.queue, k.bucket, c.completed, c.failed, c.dead
    )
    INSERT INTO jobq._counter (queue, bucket, completed, failed, dead)
    SELECT g.queue, g.bucket, sum(g.completed), sum(g.failed), sum(g.dead)
    FROM gone AS g
    GROUP BY g.queue, g.bucket;
END
$$;
COMMENT ON FUNCTION jobq._fold_counters() IS 'Folds counter rows into one per queue and minute (one per queue past a day).';

CREATE FUNCTION jobq._forget_taken() RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    -- Delete the take/hold bookkeeping of transactions that have ended
    -- (every transaction older than the oldest snapshot's xmin has).
    DELETE FROM jobq._taken AS t WHERE t.xact < pg_snapshot_xmin(pg_current_snapshot())
$$;
COMMENT ON FUNCTION jobq._forget_taken() IS 'Deletes jobq._taken rows of transactions that have ended.';

CREATE FUNCTION jobq._enqueue_args_ok(
    p_queue text, p_run_at timestamptz, p_priority integer, p_max_attempts integer, p_job_key text, p_group_key text
) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Whether an enqueue's arguments (all but the payloads) are good, in one
    -- expression (no query): only a false sends the call through the checks
    -- that name the bad argument (_check_queue, _check_time,
    -- _check_job_options, _check_job_key), which this must never be more
    -- lenient than.
    RETURN coalesce(
        p_queue ~ '^[A-Za-z0-9_.:-]{1,128}$'
        AND isfinite(p_run_at) AND p_run_at BETWEEN now() - interval '10 years' AND now() + interval '10 years'
        AND p_priority BETWEEN -32768 AND 32767
        AND (p_max_attempts IS NULL OR p_max_attempts BETWEEN 1 AND 1000)
        AND (p_job_key IS NULL OR char_length(p_job_key) BETWEEN 1 AND 512)
        AND (p_group_key IS NULL OR char_length(p_group_key) BETWEEN 1 AND 512),
        false);
END
$$;
COMMENT ON FUNCTION jobq._enqueue_args_ok(text, timestamptz, integer, integer, text, text) IS
    'True when an enqueue''s arguments are valid (the hot path''s one test; the _check functions name a bad one).';

CREATE FUNCTION jobq._insert_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text, p_timeout interval, p_unique_for interval, p_waiting boolean DEFAULT false,
    p_meta jsonb DEFAULT NULL,
    p_fair_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Insert one validated job and wake the queue's workers; with a job_key
    -- already held by an active job, return that job's id instead, and with
    -- p_unique_for also the id of the job of that key completed within
    -- p_unique_for. Loops when the holder finishes between the INSERT and
    -- the lookup. p_waiting: the job waits for parents (jobq._attach links
    -- it): status waiting, parked, and no wake-up yet. p_meta: its meta.
    -- p_fair_key: the job's fair key; none in a fair queue is '' (the
    -- keyless jobs' turn).
    IF p_unique_for IS NOT NULL THEN
        SELECT j.id INTO v_id FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        SELECT k.job_id INTO v_id FROM jobq._key_done AS k
        WHERE k.queue = p_queue AND k.job_key = p_job_key AND k.finished_at > clock_timestamp() - p_unique_for;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    FOR i IN 1..10 LOOP
        IF p_waiting THEN
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                   status, parked, has_parents, meta, fair_key)
            VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                    'waiting', true, true, p_meta,
                    coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id INTO v_id;
        ELSE
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                   meta, fair_key)
            VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                    p_meta, coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id INTO v_id;
        END IF;
        IF v_id IS NOT NULL THEN
            IF NOT p_waiting THEN
                PERFORM pg_notify('jobq', p_queue);
            END IF;
            RETURN v_id;
        END IF;
        SELECT j.id INTO v_id FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'jobq: job_key % kept changing hands while enqueueing', pg_catalog.quote_literal(p_job_key)
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._insert_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, jsonb, text) IS
    'Inserts one validated job (ready, and NOTIFYs; or waiting for parents), or returns the id of the active (or, with unique_for, recently completed) job holding its job_key.';

CREATE FUNCTION jobq._replace_job(
    p_queue text, p_payload jsonb, p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_key text, p_group_key text, p_timeout interval, p_unique_for interval, p_waiting boolean,
    p_payload_only boolean, p_meta jsonb, p_fair_key text
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_status text;
BEGIN
    -- Enqueue with on_duplicate 'replace' (p_payload_only false) or
    -- 'replace_payload' (true) and a validated job_key: the waiting, ready
    -- or scheduled job holding the key takes the new payload and meta (p_meta,
    -- which goes with the payload: the trace context of the last enqueue;
    -- it keeps its fair key, p_fair_key being a new job's)
    -- (and, with 'replace', run_at and priority; its id, attempts, max_attempts,
    -- group_key, timeout and parents stay); else a new job is inserted as
    -- jobq._insert_job does. A running holder is never changed but for one
    -- thing: it hands the key over (its job_key becomes NULL), so that the
    -- new job can hold it. With p_unique_for and no live holder, a job of
    -- the key completed within p_unique_for is returned and nothing changes.
    -- The INSERT ... ON CONFLICT locks the holder, so a claim racing with it
    -- either leases the job first (then the key moves to a new job) or sees
    -- the replaced row (it skips the locked one until this commits).
    IF p_unique_for IS NOT NULL
       AND NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.queue = p_queue AND j.job_key = p_job_key) THEN
        SELECT k.job_id INTO v_id FROM jobq._key_done AS k
        WHERE k.queue = p_queue AND k.job_key = p_job_key AND k.finished_at > clock_timestamp() - p_unique_for;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    FOR i IN 1..10 LOOP
        INSERT INTO jobq._job AS j (queue, payload, run_at, priority, max_attempts, job_key, group_key, timeout,
                                    status, parked, has_parents, meta, fair_key)
        VALUES (p_queue, p_payload, p_run_at, p_priority, p_max_attempts, p_job_key, p_group_key, p_timeout,
                CASE WHEN p_waiting THEN 'waiting' ELSE 'ready' END, p_waiting, p_waiting, p_meta,
                coalesce(p_fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = p_queue AND q.fair)))
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO UPDATE
            SET payload = excluded.payload,
                meta = excluded.meta,
                run_at = CASE WHEN p_payload_only THEN j.run_at ELSE excluded.run_at END,
                priority = CASE WHEN p_payload_only THEN j.priority ELSE excluded.priority END
            WHERE j.status <> 'running'
        RETURNING j.id, j.status INTO v_id, v_status;
        IF v_id IS NOT NULL THEN
            IF v_status = 'ready' THEN
                PERFORM pg_notify('jobq', p_queue);
            END IF;
            RETURN v_id;
        END IF;
        -- The holder is running: it lets go of the key, and the next turn inserts.
        UPDATE jobq._job AS j SET job_key = NULL
        WHERE j.queue = p_queue AND j.job_key = p_job_key AND j.status = 'running';
    END LOOP;
    RAISE EXCEPTION 'jobq: job_key % kept changing hands while enqueueing', pg_catalog.quote_literal(p_job_key)
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._replace_job(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, boolean, boolean, jsonb, text) IS
    'Enqueue with on_duplicate replace/replace_payload: updates the waiting, ready or scheduled job holding the key, else inserts (a running holder hands the key over).';

CREATE FUNCTION jobq._check_enqueue_many_args(
    p_queue text, p_payloads jsonb[], p_run_at timestamptz, p_priority integer, p_max_attempts integer,
    p_job_keys text[], p_group_key text, p_timeout interval, p_unique_for interval, p_depends_on bigint[],
    p_on_parent_failure text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise the JQ error of the first bad argument of jobq.enqueue_many, all
    -- but the payloads' elements and the job keys (checked where they are
    -- used): the checks that name the bad argument, which enqueue_many runs
    -- only when its fast check (jobq._enqueue_args_ok and the rest of its
    -- one expression) says no.
    PERFORM jobq._check_queue(p_queue, 'queue');
    IF p_payloads IS NULL THEN
        RAISE EXCEPTION 'jobq: payloads must not be NULL'
            USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
    END IF;
    IF array_ndims(p_payloads) > 1 THEN
        RAISE EXCEPTION 'jobq: payloads must be a one-dimensional array, got % dimensions %',
                array_ndims(p_payloads), array_dims(p_payloads)
            USING ERRCODE = 'JQ002',
                  HINT = 'Pass a list of JSON objects, e.g. ARRAY[''{"a":1}'', ''{"a":2}'']::jsonb[].';
    END IF;
    PERFORM jobq._check_batch(cardinality(p_payloads), 'cardinality(payloads)', 100000);
    PERFORM jobq._check_time(p_run_at, 'run_at');
    PERFORM jobq._check_job_options(p_priority, p_max_attempts);
    PERFORM jobq._check_job_key(p_group_key, 'group_key');
    PERFORM jobq._check_interval(p_timeout, 'timeout', interval '1 second', interval '1 day');
    PERFORM jobq._check_unique_for(p_unique_for, p_job_keys IS NOT NULL, 'job_keys');
    PERFORM jobq._check_dependencies(coalesce(p_depends_on, '{}'), 'depends_on', p_on_parent_failure);
END
$$;
COMMENT ON FUNCTION jobq._check_enqueue_many_args(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text) IS
    'Raises the JQ error of the first bad argument of enqueue_many (but payload elements and job keys).';

CREATE FUNCTION jobq._check_job_keys(p_job_keys text[], p_n integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item record;
BEGIN
    -- Raise JQ009 unless p_job_keys is a list of p_n keys (or NULLs), each
    -- NULL or 1 to 512 characters; a bad key is named by its own subscript
    -- (arrays may start at another index than 1, e.g. '[0:1]={...}').
    IF array_ndims(p_job_keys) > 1 THEN
        RAISE EXCEPTION 'jobq: job_keys must be a one-dimensional array, got % dimensions %',
                array_ndims(p_job_keys), array_dims(p_job_keys)
            USING ERRCODE = 'JQ009', HINT = 'Pass a list of keys (or NULLs), one per payload.';
    END IF;
    IF cardinality(p_job_keys) <> p_n THEN
        RAISE EXCEPTION 'jobq: job_keys has % elements but payloads has %', cardinality(p_job_keys), p_n
            USING ERRCODE = 'JQ009', HINT = 'Pass one key (or NULL) per payload, or job_keys => NULL.';
    END IF;
    FOR v_item IN SELECT x.job_key, x.ord FROM unnest(p_job_keys) WITH ORDINALITY AS x(job_key, ord) LOOP
        PERFORM jobq._check_job_key(v_item.job_key, format('job_keys[%s]', array_lower(p_job_keys, 1) + v_item.ord - 1));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_job_keys(text[], integer) IS
    'Raises JQ009 for job_keys that are not one key (or NULL) per payload, each NULL or 1 to 512 characters.';

CREATE FUNCTION jobq._check_metas(p_metas jsonb[], p_n integer, p_max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad record;
BEGIN
    -- Raise JQ002/JQ003 unless p_metas (enqueue_many's metas, not NULL) is a
    -- list of p_n JSON objects, each within p_max_bytes; a bad one is named
    -- by its own subscript (arrays may start at another index than 1).
    IF array_ndims(p_metas) > 1 THEN
        RAISE EXCEPTION 'jobq: metas must be a one-dimensional array, got % dimensions %',
                array_ndims(p_metas), array_dims(p_metas)
            USING ERRCODE = 'JQ002', HINT = 'Pass a list of JSON objects, one per payload, or metas => NULL.';
    END IF;
    IF cardinality(p_metas) <> p_n THEN
        RAISE EXCEPTION 'jobq: metas has % elements but payloads has %', cardinality(p_metas), p_n
            USING ERRCODE = 'JQ002', HINT = 'Pass one JSON object (''{}'' for none) per payload, or metas => NULL.';
    END IF;
    SELECT m.meta, m.ord INTO v_bad
    FROM unnest(p_metas) WITH ORDINALITY AS m(meta, ord)
    WHERE m.meta IS NULL OR jsonb_typeof(m.meta) <> 'object' OR pg_column_size(m.meta) > p_max_bytes
    ORDER BY m.ord LIMIT 1;
    IF FOUND THEN
        IF v_bad.meta IS NULL THEN
            RAISE EXCEPTION 'jobq: metas[%] must be a JSON object, got NULL', array_lower(p_metas, 1) + v_bad.ord - 1
                USING ERRCODE = 'JQ002', HINT = 'Pass ''{}'' for a job without meta, or metas => NULL for none.';
        END IF;
        PERFORM jobq._check_meta(v_bad.meta, format('metas[%s]', array_lower(p_metas, 1) + v_bad.ord - 1), p_max_bytes);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_metas(jsonb[], integer, integer) IS
    'Raises JQ002 for metas that are not one JSON object per payload, JQ003 for one over the size cap.';

CREATE FUNCTION jobq._error_text(p_error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- An error message bounded to 10,000 characters: a long one (a deep
    -- traceback) keeps its head and its tail, where the exception is.
    SELECT CASE WHEN char_length(p_error) <= 10000 THEN p_error
                ELSE left(p_error, 2000) || E'\n[… ' || (char_length(p_error) - 9900)::text
                     || ' characters cut …]\n' || right(p_error, 7900) END
$$;
COMMENT ON FUNCTION jobq._error_text(text) IS 'Bounds an error message to 10,000 characters, keeping head and tail.';

CREATE FUNCTION jobq._reap_note(p_expired timestamptz, p_worker text, p_previous text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The error a reaped job records: its lease expiry, then its previous error.
    SELECT jobq._error_text(format('lease expired at %s (worker %s)', p_expired, coalesce(p_worker, 'unnamed'))
                            || coalesce(E'\nprevious error: ' || p_previous, ''))
$$;
COMMENT ON FUNCTION jobq._reap_note(timestamptz, text, text) IS 'The last_error of a reaped job: lease expiry, then the previous error.';

CREATE FUNCTION jobq._record_errors(p_ids bigint[], p_attempts integer[], p_errors text[], p_workers text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
    -- Keep the error of each failed attempt (job, attempt, error, worker, one
    -- per array position) in jobq._job_error, and of each of these jobs only
    -- the last 25: a job failing for days keeps a bounded history. By the
    -- jobs' ids only (index paths), whatever size the table had when the
    -- session planned these statements.
    INSERT INTO jobq._job_error (job_id, attempt, error, failed_at, worker)
    SELECT u.id, u.attempt, u.error, clock_timestamp(), u.worker
    FROM unnest(p_ids, p_attempts, p_errors, p_workers) AS u(id, attempt, error, worker);
    DELETE FROM jobq._job_error AS e
    USING (SELECT u.id,
                  (SELECT k.failed_at FROM jobq._job_error AS k
                   WHERE k.job_id = u.id
                   ORDER BY k.failed_at DESC
                   OFFSET 24 LIMIT 1) AS oldest_kept
           FROM unnest(p_ids) AS u(id)) AS c
    WHERE e.job_id = c.id AND e.failed_at < c.oldest_kept;
END
$$;
COMMENT ON FUNCTION jobq._record_errors(bigint[], integer[], text[], text[]) IS
    'Records the error of failed attempts in jobq._job_error, keeping the last 25 per job.';

CREATE FUNCTION jobq._check_parents_issued(p_parents bigint[], p_arg text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_last bigint;
    v_unknown bigint;
BEGIN
    -- Raise JQ019 when p_parents (validated by _check_dependencies) names an
    -- id jobq never issued. Reads the id sequence only: it locks no job, so
    -- naming a job never holds up its claim, heartbeat or acknowledgement.
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END INTO v_last FROM jobq._job_id_seq AS s;
    SELECT u.id INTO v_unknown
    FROM unnest(p_parents) AS u(id)
    WHERE u.id NOT BETWEEN 1 AND v_last
    ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: % names job %, which does not exist', p_arg, v_unknown
            USING ERRCODE = 'JQ019', HINT = 'Pass ids that jobq.enqueue() returned.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_parents_issued(bigint[], text) IS
    'Raises JQ019 when a depends_on/members id was never issued by jobq; locks nothing.';

CREATE FUNCTION jobq._gate_recount(p_children bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    -- Set the gates of waiting jobs from their parents' states now: live
    -- (in jobq._job), completed, dead or cancelled (history), and completed
    -- when jobq no longer knows the parent (finished without history, or
    -- pruned). The gates are locked first, in id order, so the count runs in
    -- a statement that starts after every finishing parent that held them
    -- committed.
    PERFORM FROM jobq._job_wait AS w WHERE w.job_id = ANY (p_children) ORDER BY w.job_id FOR UPDATE;
    WITH state AS (
        SELECT d.child_id,
               CASE WHEN j.id IS NOT NULL THEN 'live' ELSE coalesce(a.status, 'completed') END AS outcome
        FROM jobq._job_dep AS d
        LEFT JOIN jobq._job AS j ON j.id = d.parent_id
        LEFT JOIN jobq._job_archive AS a ON a.id = d.parent_id
        WHERE d.child_id = ANY (p_children)
    ), counted AS (
        SELECT s.child_id,
               count(*) FILTER (WHERE s.outcome = 'live') AS live,
               count(*) FILTER (WHERE s.outcome = 'completed') AS completed,
               count(*) FILTER (WHERE s.outcome = 'dead') AS dead,
               count(*) FILTER (WHERE s.outcome = 'cancelled') AS cancelled
        FROM state AS s
        GROUP BY s.child_id
    )
    UPDATE jobq._job_wait AS w
    SET parents_left = c.live, completed = c.completed, dead = c.dead, cancelled = c.cancelled
    FROM counted AS c
    WHERE w.job_id = c.child_id;
END
$$;
COMMENT ON FUNCTION jobq._gate_recount(bigint[]) IS
    'Recounts the gates of waiting jobs from their parents'' current states (live, completed, dead, cancelled).';

CREATE FUNCTION jobq._settle(p_children bigint[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_cause record;
    v_cancelled bigint[] := '{}';
    v_queues text[];
BEGIN
    -- Act on the gates of waiting jobs (locked by the caller): cancel those
    -- that take a parent's failure as theirs ('cancel') and have a dead or
    -- cancelled parent, recording the root of it (the parent, or the root
    -- that cancelled the parent); release those with no parent left: ready
    -- (scheduled when their own run_at is later), a batch callback with its
    -- members' counts in its payload, and their queues woken. A released job
    -- keeps its gate (its on_parent_failure): a retry after it ran goes
    -- through it again. Returns the ids cancelled here: their own
    -- dependents are the caller's next step.
    FOR v_cause IN
        SELECT c.cause, array_agg(c.job_id ORDER BY c.job_id) AS ids,
               coalesce((SELECT r.status FROM jobq._job_archive AS r WHERE r.id = c.cause), 'dead') AS fate
        FROM (SELECT w.job_id, min(coalesce(a.cancelled_by, a.id)) AS cause
              FROM jobq._job_wait AS w
              JOIN jobq._job_dep AS d ON d.child_id = w.job_id
              JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status IN ('dead', 'cancelled')
              WHERE w.job_id = ANY (p_children) AND w.on_parent_failure = 'cancel' AND w.dead + w.cancelled > 0
              GROUP BY w.job_id) AS c
        GROUP BY c.cause
    LOOP
        v_cancelled := v_cancelled || ARRAY(
            SELECT jobq._finish(p_ids => v_cause.ids, p_lease_tokens => NULL, p_status => 'cancelled',
                                p_error => format('cancelled: ancestor job %s %s', v_cause.cause,
                                                  CASE v_cause.fate WHEN 'cancelled' THEN 'was cancelled' ELSE 'is dead' END),
                                p_cause => v_cause.cause));
    END LOOP;
    WITH released AS (
        UPDATE jobq._job AS j
        SET status = 'ready',
            parked = false,
            payload = CASE WHEN w.report
                           THEN j.payload || jsonb_build_object('batch', jsonb_build_object(
                                    'members', w.completed + w.dead + w.cancelled, 'completed', w.completed,
                                    'dead', w.dead, 'cancelled', w.cancelled))
                           ELSE j.payload END
        FROM jobq._job_wait AS w
        WHERE w.job_id = j.id AND j.id = ANY (p_children) AND j.status = 'waiting'
          AND w.parents_left = 0 AND (w.on_parent_failure = 'run' OR w.dead + w.cancelled = 0)
        RETURNING j.id, j.queue
    )
    SELECT array_agg(DISTINCT r.queue) INTO v_queues FROM released AS r;
    PERFORM pg_notify('jobq', q.queue) FROM unnest(v_queues) AS q(queue);
    RETURN v_cancelled;
END
$$;
COMMENT ON FUNCTION jobq._settle(bigint[]) IS
    'Cancels waiting jobs whose parent failed (on_parent_failure cancel) and releases those with no parent left; returns the cancelled ids.';

CREATE FUNCTION jobq._finish_dependents(p_parents bigint[], p_status text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_seqscan = off
SET join_collapse_limit = 1
AS $$
DECLARE
    v_doomed bigint[] := '{}';
    v_cause record;
    v_released bigint[];
BEGIN
    -- Jobs p_parents just left the live table as p_status (completed, dead
    -- or cancelled): cancel the descendants their failure dooms, count the
    -- finished jobs in the gates of the waiting children that remain, and
    -- release those with no parent left. The cascade is one pass, linear in
    -- the edges it follows (0.8.0 went level by level, re-planning nothing,
    -- and a chain 3,000 deep took 15 s): every waiting descendant with
    -- on_parent_failure 'cancel' reachable from a failed parent through
    -- such jobs, each cancelled with the lowest root among its failed
    -- ancestors (a failed parent's root: itself, or the root that
    -- cancelled it) as cancelled_by, one jobq._finish per root. The
    -- remaining waiting children of the parents and of the cancelled jobs
    -- ('run' children, and any child of a completed parent) have their
    -- gates updated by outcome in one statement, locked in id order as late
    -- as possible, so that a wide fan-in's completions hold a gate only for
    -- their commit. The gates the cancelled jobs keep are left as they are
    -- (a retry recounts them). Planned at each call (force_custom_plan),
    -- with the tables' sizes of then, on index paths only and joining in
    -- the order written (each step from the jobs found in the last): a
    -- plan cached while a graph was small (or never analyzed) scanned a
    -- whole table at each step, and so does a recursion whose step starts
    -- from the table instead of from the last step's jobs.
    IF p_status <> 'completed' THEN
        FOR v_cause IN
            WITH RECURSIVE doomed (id, root) AS (
                SELECT d.child_id, coalesce(a.cancelled_by, a.id)
                FROM unnest(p_parents) AS p(id)
                JOIN jobq._job_archive AS a ON a.id = p.id
                JOIN jobq._job_dep AS d ON d.parent_id = p.id
                JOIN jobq._job_wait AS w ON w.job_id = d.child_id AND w.on_parent_failure = 'cancel'
                JOIN jobq._job AS j ON j.id = d.child_id AND j.status = 'waiting'
              UNION
                SELECT d.child_id, x.root
                FROM doomed AS x
                JOIN jobq._job_dep AS d ON d.parent_id = x.id
                JOIN jobq._job_wait AS w ON w.job_id = d.child_id AND w.on_parent_failure = 'cancel'
                JOIN jobq._job AS j ON j.id = d.child_id AND j.status = 'waiting'
            )
            SELECT r.root AS cause, array_agg(r.id ORDER BY r.id) AS ids,
                   coalesce((SELECT a.status FROM jobq._job_archive AS a WHERE a.id = r.root), 'dead') AS fate
            FROM (SELECT x.id, min(x.root) AS root FROM doomed AS x GROUP BY x.id) AS r
            GROUP BY r.root
            ORDER BY r.root
        LOOP
            v_doomed := v_doomed || ARRAY(
                SELECT jobq._finish(p_ids => v_cause.ids, p_lease_tokens => NULL, p_status => 'cancelled',
                                    p_error => format('cancelled: ancestor job %s %s', v_cause.cause,
                                                      CASE v_cause.fate WHEN 'cancelled' THEN 'was cancelled' ELSE 'is dead' END),
                                    p_cause => v_cause.cause));
        END LOOP;
    END IF;
    WITH counted AS (
        SELECT d.child_id,
               count(*) FILTER (WHERE f.doomed)::integer AS cancelled_here,
               count(*) FILTER (WHERE NOT f.doomed)::integer AS finished_here
        FROM (SELECT u.id, false AS doomed FROM unnest(p_parents) AS u(id)
              UNION ALL
              SELECT u.id, true FROM unnest(v_doomed) AS u(id)) AS f
        JOIN jobq._job_dep AS d ON d.parent_id = f.id
        GROUP BY d.child_id
    ), locked AS MATERIALIZED (
        SELECT w.job_id, c.cancelled_here, c.finished_here
        FROM counted AS c
        JOIN jobq._job_wait AS w ON w.job_id = c.child_id
        JOIN jobq._job AS j ON j.id = c.child_id AND j.status = 'waiting'
        ORDER BY w.job_id
        FOR UPDATE OF w
    ), updated AS (
        UPDATE jobq._job_wait AS w
        SET parents_left = w.parents_left - l.cancelled_here - l.finished_here,
            completed = w.completed + CASE WHEN p_status = 'completed' THEN l.finished_here ELSE 0 END,
            dead = w.dead + CASE WHEN p_status = 'dead' THEN l.finished_here ELSE 0 END,
            cancelled = w.cancelled + l.cancelled_here
                        + CASE WHEN p_status = 'cancelled' THEN l.finished_here ELSE 0 END
        FROM locked AS l
        WHERE w.job_id = l.job_id
        RETURNING w.job_id, w.parents_left = 0 OR (w.on_parent_failure = 'cancel' AND w.dead + w.cancelled > 0)
                            AS settles
    )
    SELECT coalesce(array_agg(u.job_id ORDER BY u.job_id) FILTER (WHERE u.settles), '{}')
    INTO v_released
    FROM updated AS u;
    IF cardinality(v_released) > 0 THEN
        -- Released here; a 'cancel' child found with a failed parent (one
        -- not waiting when the cascade looked) is cancelled, and its own
        -- dependents follow.
        v_doomed := jobq._settle(v_released);
        IF cardinality(v_doomed) > 0 THEN
            PERFORM jobq._finish_dependents(v_doomed, 'cancelled');
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._finish_dependents(bigint[], text) IS
    'Cancels the descendants that finished parents'' failure dooms (one pass), counts the finished jobs in the remaining waiting children''s gates, and releases those with no parent left.';

CREATE FUNCTION jobq._attach(p_children bigint[], p_parents bigint[], p_on_parent_failure text, p_report boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_new bigint[];
    v_counts record;
    v_waiting bigint[];
BEGIN
    -- Link jobs just enqueued as waiting (jobq._insert_job with p_waiting)
    -- to p_parents (ids checked by jobq._check_parents_issued): edges, a
    -- gate counting the parents' states as this statement sees them, then
    -- cancel or release at once what needs no wait. Ids that came back for
    -- a held job_key (an existing job) are left as they are: only waiting
    -- jobs without a gate are new. No parent is locked or written here:
    -- those still waiting are handed to jobq._settle_at_commit, which flags
    -- their parents and counts their gates again when this transaction
    -- commits, so a parent that finishes meanwhile is never missed and this
    -- transaction never holds up a worker (see that function).
    v_new := ARRAY(SELECT j.id FROM jobq._job AS j
                   WHERE j.id = ANY (p_children) AND j.status = 'waiting'
                     AND NOT EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = j.id)
                   ORDER BY j.id);
    IF cardinality(v_new) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO jobq._job_dep (parent_id, child_id)
    SELECT p.id, c.id FROM unnest(p_parents) AS p(id) CROSS JOIN unnest(v_new) AS c(id);
    -- Every new job has the same parents: count their states once (live,
    -- else as history says; completed when jobq no longer knows it).
    SELECT count(*) FILTER (WHERE s.outcome = 'live') AS live,
           count(*) FILTER (WHERE s.outcome = 'completed') AS completed,
           count(*) FILTER (WHERE s.outcome = 'dead') AS dead,
           count(*) FILTER (WHERE s.outcome = 'cancelled') AS cancelled
    INTO v_counts
    FROM (SELECT CASE WHEN EXISTS (SELECT FROM jobq._job AS j WHERE j.id = p.id) THEN 'live'
                      ELSE coalesce((SELECT a.status FROM jobq._job_archive AS a WHERE a.id = p.id), 'completed')
                 END AS outcome
          FROM unnest(p_parents) AS p(id)) AS s;
    INSERT INTO jobq._job_wait (job_id, parents_left, completed, dead, cancelled, on_parent_failure, report)
    SELECT c.id, v_counts.live, v_counts.completed, v_counts.dead, v_counts.cancelled, p_on_parent_failure, p_report
    FROM unnest(v_new) AS c(id);
    IF v_counts.live > 0 AND (p_on_parent_failure = 'run' OR v_counts.dead + v_counts.cancelled = 0) THEN
        v_waiting := v_new;   -- the common case: a live parent, no failure yet
    ELSE
        PERFORM jobq._settle(v_new);
        v_waiting := ARRAY(SELECT j.id FROM jobq._job AS j
                           WHERE j.id = ANY (v_new) AND j.status = 'waiting'
                           ORDER BY j.id);
    END IF;
    IF cardinality(v_waiting) > 0 THEN
        INSERT INTO jobq._at_commit (parents, children) VALUES (p_parents, v_waiting);
        PERFORM set_config('jobq.named_jobs', 'on', true);   -- for jobq._finish in this transaction
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._attach(bigint[], bigint[], text, boolean) IS
    'Links newly enqueued waiting jobs to their parents (edges, gates), settles what need not wait, and leaves the rest to the commit.';

CREATE FUNCTION jobq._settle_at_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_parents bigint[];
    v_children bigint[];
    v_watched bigint[];
    v_cancelled bigint[];
BEGIN
    -- What naming a job (depends_on, members, watch) needs from that job,
    -- done when the naming transaction commits: jobq._at_commit's deferred
    -- constraint trigger runs this at COMMIT, before the commit itself. The
    -- first run takes every row of this transaction, in one pass.
    -- In id order, the named jobs still live are key-share-locked and
    -- flagged: has_children for parents, watched for watched jobs. From
    -- then until the commit ends (a moment), a finishing DELETE of one of
    -- them waits and then sees the flag and the committed edges; one that
    -- finished before is no longer live here. So the waiting children's
    -- gates are counted again now, in statements that start after the
    -- locks: a parent that finished since the enqueue is counted finished,
    -- and the children it released or cancelled are settled (cancelled
    -- ones' own dependents too). A watched job that finished since watch()
    -- saw it live is notified from here. Nothing is locked before the
    -- commit, so an open producer transaction never holds up a claim,
    -- heartbeat or acknowledgement of the jobs it names (0.8.0 locked them
    -- at the enqueue, until the commit). Locks go in id order, as
    -- jobq._finish deletes: no deadlock with a completion. A later run
    -- finds its own row gone (one probe of the primary key) and stops.
    IF NOT EXISTS (SELECT FROM jobq._at_commit AS c WHERE c.id = NEW.id) THEN
        RETURN NULL;
    END IF;
    WITH mine AS (
        DELETE FROM jobq._at_commit AS c WHERE c.xact = pg_current_xact_id()
        RETURNING c.parents, c.children, c.watched
    )
    SELECT ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.parents) AS u(id)),
           ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.children) AS u(id)),
           ARRAY(SELECT DISTINCT u.id FROM mine AS m, unnest(m.watched) AS u(id))
    INTO v_parents, v_children, v_watched;
    IF cardinality(v_parents) + cardinality(v_children) + cardinality(v_watched) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM FROM jobq._job AS j
    WHERE j.id = ANY (v_parents || v_watched)
    ORDER BY j.id
    FOR KEY SHARE OF j;
    UPDATE jobq._job AS j
    SET has_children = j.has_children OR j.id = ANY (v_parents),
        watched = j.watched OR j.id = ANY (v_watched)
    WHERE j.id IN (SELECT u.id FROM jobq._job AS u
                   WHERE (u.id = ANY (v_parents) AND NOT u.has_children)
                      OR (u.id = ANY (v_watched) AND NOT u.watched)
                   ORDER BY u.id
                   FOR NO KEY UPDATE OF u);
    PERFORM pg_notify('jobq_finished', w.id::text)
    FROM unnest(v_watched) AS w(id)
    WHERE NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = w.id);
    v_children := ARRAY(SELECT j.id FROM jobq._job AS j
                        WHERE j.id = ANY (v_children) AND j.status = 'waiting'
                        ORDER BY j.id);
    IF cardinality(v_children) > 0 THEN
        PERFORM jobq._gate_recount(v_children);
        v_cancelled := jobq._settle(v_children);
        IF cardinality(v_cancelled) > 0 THEN
            PERFORM jobq._finish_dependents(v_cancelled, 'cancelled');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._settle_at_commit() IS
    'At commit: flags the live jobs this transaction named (has_children, watched) and settles its waiting children against their parents'' states then.';

CREATE CONSTRAINT TRIGGER _500_settle_at_commit
    AFTER INSERT ON jobq._at_commit
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION jobq._settle_at_commit();

CREATE FUNCTION jobq._restore_descendants(p_root bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_set bigint[];
    v_blocked bigint[];
    v_moved bigint[];
    v_gates bigint[];
    v_cancelled bigint[];
BEGIN
    -- p_root (dead or cancelled) is live again (jobq.retry): bring back the
    -- descendants its failure cancelled (cancelled_by = p_root) as waiting,
    -- put the children its failure (or theirs) released and nobody claimed
    -- back to waiting, and recount the gates of the waiting children of all
    -- of these, which counted them as failed. A descendant with another dead or cancelled parent
    -- outside that set stays cancelled, re-rooted to that parent's root (a
    -- retry of that one restores it), and so do its own descendants in the
    -- set. One whose job_key an active job now holds stays cancelled.
    -- Returns how many came back.
    v_set := ARRAY(SELECT a.id FROM jobq._job_archive AS a
                   WHERE a.cancelled_by = p_root AND a.status = 'cancelled'
                   ORDER BY a.id
                   FOR UPDATE);
    LOOP
        v_blocked := ARRAY(
            SELECT DISTINCT d.child_id
            FROM jobq._job_dep AS d
            JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status IN ('dead', 'cancelled')
            WHERE d.child_id = ANY (v_set) AND a.id <> ALL (v_set));
        EXIT WHEN cardinality(v_blocked) = 0;
        UPDATE jobq._job_archive AS c
        SET cancelled_by = (SELECT min(coalesce(p.cancelled_by, p.id))
                            FROM jobq._job_dep AS d
                            JOIN jobq._job_archive AS p ON p.id = d.parent_id AND p.status IN ('dead', 'cancelled')
                            WHERE d.child_id = c.id AND p.id <> ALL (v_set))
        WHERE c.id = ANY (v_blocked);
        v_set := ARRAY(SELECT u.id FROM unnest(v_set) AS u(id) WHERE u.id <> ALL (v_blocked));
    END LOOP;
    IF cardinality(v_set) > 0 THEN
        WITH moved AS (
            INSERT INTO jobq._job (id, queue, payload, status, parked, priority, run_at, attempts, max_attempts,
                                   job_key, created_at, group_key, timeout, has_children, has_parents, meta,
                                   fair_key)
            SELECT a.id, a.queue, a.payload, 'waiting', true, a.priority, a.run_at, a.attempts, a.max_attempts,
                   a.job_key, a.created_at, a.group_key, a.timeout,
                   EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.parent_id = a.id), true, a.meta,
                   coalesce(a.fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = a.queue AND q.fair))
            FROM jobq._job_archive AS a
            WHERE a.id = ANY (v_set)
            ORDER BY a.id
            ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
            RETURNING id
        )
        SELECT coalesce(array_agg(m.id ORDER BY m.id), '{}') INTO v_moved FROM moved AS m;
        DELETE FROM jobq._job_archive AS a WHERE a.id = ANY (v_moved);
        IF cardinality(v_moved) < cardinality(v_set) THEN
            RAISE NOTICE 'jobq: % descendants of job % stay cancelled: their job_key is held by an active job',
                cardinality(v_set) - cardinality(v_moved), p_root;
        END IF;
        -- They kept their gates (and on_parent_failure) when cancelled.
        INSERT INTO jobq._job_wait (job_id, parents_left, on_parent_failure)
        SELECT m.id, 0, 'cancel' FROM unnest(v_moved) AS m(id)
        ON CONFLICT (job_id) DO NOTHING;
    ELSE
        v_moved := '{}';
    END IF;
    -- Children of p_root or of those moved back that a failure released
    -- ('run' children, batch callbacks) and no worker has claimed yet wait
    -- again: a parent of theirs is live again. (One claimed meanwhile runs
    -- with the counts it was released with.)
    UPDATE jobq._job AS j SET status = 'waiting', parked = true
    WHERE j.id IN (SELECT r.id FROM jobq._job AS r
                   WHERE r.id IN (SELECT d.child_id FROM jobq._job_dep AS d
                                  WHERE d.parent_id = p_root OR d.parent_id = ANY (v_moved))
                     AND r.status = 'ready'
                     AND EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = r.id)
                   ORDER BY r.id
                   FOR NO KEY UPDATE OF r);
    -- The gates to recount: those moved back, and the waiting children of
    -- p_root and of those moved back (the gates of finished ones are
    -- recounted by their own retry).
    v_gates := ARRAY(SELECT w.job_id FROM jobq._job_wait AS w
                     JOIN jobq._job AS j ON j.id = w.job_id AND j.status = 'waiting'
                     WHERE w.job_id IN (SELECT d.child_id FROM jobq._job_dep AS d
                                        WHERE d.parent_id = p_root OR d.parent_id = ANY (v_moved))
                        OR w.job_id = ANY (v_moved)
                     ORDER BY w.job_id);
    PERFORM jobq._gate_recount(v_gates);
    v_cancelled := jobq._settle(v_gates);
    IF cardinality(v_cancelled) > 0 THEN
        PERFORM jobq._finish_dependents(v_cancelled, 'cancelled');
    END IF;
    RETURN cardinality(v_moved);
END
$$;
COMMENT ON FUNCTION jobq._restore_descendants(bigint) IS
    'After a retry of a dead or cancelled job: its cascade-cancelled descendants wait again (unless another failed parent holds them).';

CREATE FUNCTION jobq._archive_index(p_partition text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Create the indexes of one partition of jobq._job_archive, named after
    -- it: by id (jobq.status, result, retry, a job's page: one probe per
    -- partition), by (queue, id) (a queue's history newest first: a merge of
    -- the partitions' scans), dead jobs by (queue, id) (retry_dead,
    -- discard_dead), keyed jobs by (queue, job_key, id), cancelled
    -- descendants by their root (a retry restores them); and for the default
    -- partition, whose expired rows prune deletes one by one, by prune_after.
    EXECUTE format('CREATE INDEX %I ON jobq.%I (id)', p_partition || '_id_idx', p_partition);
    EXECUTE format('CREATE INDEX %I ON jobq.%I (queue, id)', p_partition || '_queue_idx', p_partition);
    EXECUTE format('CREATE INDEX %I ON jobq.%I (queue, id) WHERE status = %L',
                   p_partition || '_dead_idx', p_partition, 'dead');
    EXECUTE format('CREATE INDEX %I ON jobq.%I (queue, job_key, id) WHERE job_key IS NOT NULL',
                   p_partition || '_key_idx', p_partition);
    EXECUTE format('CREATE INDEX %I ON jobq.%I (cancelled_by) WHERE cancelled_by IS NOT NULL',
                   p_partition || '_cancelled_by_idx', p_partition);
    IF p_partition = '_job_archive_kept' THEN
        EXECUTE format('CREATE INDEX %I ON jobq.%I (prune_after) WHERE prune_after IS NOT NULL',
                       p_partition || '_prune_idx', p_partition);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._archive_index(text) IS
    'Creates the indexes of one partition of the archive (id, queue history, dead, keys, cancelled_by).';

-- The default partition's indexes (made here: jobq._archive_index is the one
-- place that lists them).
SELECT jobq._archive_index('_job_archive_kept');

CREATE FUNCTION jobq._archive_horizon() RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- How far ahead jobq.prune() creates the archive's day partitions: the longest retention configured anywhere, at most 31 days.
    SELECT least(greatest(d.retention, d.result_retention,
                          max(q.retention), max(q.result_retention), max(q.dead_retention)),
                 interval '31 days')
    FROM jobq._queue_defaults AS d
    LEFT JOIN jobq._queue AS q ON true
    GROUP BY d.retention, d.result_retention;
$$;
COMMENT ON FUNCTION jobq._archive_horizon() IS
    'How far ahead the archive''s day partitions are created: the longest configured retention, at most 31 days.';

CREATE FUNCTION jobq._autovacuum_yield_timeout() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- A lock_timeout (in ms) that outlasts deadlock_timeout by a second. A
    -- lock request that has waited deadlock_timeout cancels an autovacuum
    -- that holds the lock (unless it prevents wraparound), so a prune waiting
    -- this long gets the partition autovacuum was working on instead of
    -- leaving it for the next run. At most 10 s: a waiting lock of the
    -- default partition holds up the jobs archived into it.
    SELECT least((extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)::bigint + 1000,
                 10000)::text;
$$;
COMMENT ON FUNCTION jobq._autovacuum_yield_timeout() IS
    'A lock_timeout that outlasts deadlock_timeout by 1 s (at most 10 s), so that a blocking autovacuum is cancelled before the wait gives up.';

CREATE FUNCTION jobq._archive_add(p_from date, p_to date) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    v_from timestamptz := p_from::timestamp AT TIME ZONE 'UTC';
    v_to timestamptz := p_to::timestamp AT TIME ZONE 'UTC';
    v_name text := CASE WHEN p_from IS NULL THEN '_job_archive_until' || to_char(p_to, 'YYYYMMDD')
                        ELSE '_job_archive_p' || to_char(p_from, 'YYYYMMDD') END;
BEGIN
    -- Create the archive's partition of the UTC days [p_from, p_to) of
    -- prune_after (one day, as jobq.prune makes them; p_from NULL: all
    -- before p_to, as the upgrade to 0.7.0 makes for rows already expired),
    -- with the rows of those days moved out of the default partition (rows
    -- that arrived before the day had a partition); false when a partition
    -- covers part of it already. Built as a table and then attached: ATTACH
    -- takes only a SHARE UPDATE EXCLUSIVE lock on jobq._job_archive
    -- (finishing jobs go on archiving meanwhile), where CREATE TABLE ...
    -- PARTITION OF would take an ACCESS EXCLUSIVE one. Attaching scans the
    -- default partition (under an ACCESS EXCLUSIVE lock of it alone) to prove
    -- it holds no row of the range; the CHECK constraint spares the scan of
    -- the new table. A lock not granted within lock_timeout (past
    -- deadlock_timeout: an autovacuum of the default partition yields)
    -- raises lock_not_available.
    PERFORM pg_catalog.set_config('lock_timeout', jobq._autovacuum_yield_timeout(), true);
    IF EXISTS (SELECT FROM jobq.archive_partitions AS p
               WHERE coalesce(p.from_time, '-infinity') < v_to AND p.to_time > coalesce(v_from, '-infinity')) THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE jobq.%I (LIKE jobq._job_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS, '
                   'CONSTRAINT %I CHECK (prune_after IS NOT NULL AND prune_after >= %L AND prune_after < %L)) '
                   'WITH (autovacuum_vacuum_cost_delay = 0)',
                   v_name, v_name || '_range', coalesce(v_from, '-infinity'), v_to);
    EXECUTE format('WITH moved AS (DELETE FROM jobq._job_archive_kept AS k '
                   'WHERE k.prune_after >= $1 AND k.prune_after < $2 RETURNING k.*) '
                   'INSERT INTO jobq.%I SELECT m.* FROM moved AS m', v_name)
        USING coalesce(v_from, '-infinity'), v_to;
    PERFORM jobq._archive_index(v_name);
    EXECUTE format('ALTER TABLE jobq._job_archive ATTACH PARTITION jobq.%I FOR VALUES FROM (%s) TO (%L)',
                   v_name, coalesce(quote_literal(v_from), 'MINVALUE'), v_to);
    -- Created by an extension script (the upgrade to 0.7.0 places the rows
    -- it converts), the table is a member of the extension, which no later
    -- DROP TABLE could remove, and which CREATE EXTENSION would create again
    -- when a dump is restored. A day partition belongs to the data.
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
               WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                 AND d.objid = format('jobq.%I', v_name)::pg_catalog.regclass
                 AND d.deptype = 'e') THEN
        EXECUTE format('ALTER EXTENSION jobq DROP TABLE jobq.%I', v_name);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._archive_add(date, date) IS
    'Creates the archive''s partition of the UTC days [p_from, p_to) of prune_after, moving their rows out of the default partition.';

CREATE FUNCTION jobq._archive_drop(p_partition text, p_from timestamptz, p_to timestamptz) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    v_count bigint;
BEGIN
    -- Drop one expired partition of the archive (every row in it is past
    -- its prune_after) with its jobs' error history, edges and gates, after
    -- moving out the jobs jobq.prune keeps: a completed parent with a live
    -- child, a dead or cancelled one with any known child (a forgotten
    -- parent counts as completed). They move an hour ahead, to be checked
    -- again then. Returns how many jobs went, or NULL when a lock was not
    -- granted within lock_timeout (nothing changed: the next prune tries
    -- again). The partition is locked first (EXCLUSIVE: readers go on, a
    -- concurrent retry waits and then finds its job gone), then DROP TABLE
    -- takes an ACCESS EXCLUSIVE lock of jobq._job_archive for the moment
    -- until commit: archiving completions wait that long. lock_timeout
    -- outlasts deadlock_timeout: an autovacuum of the partition yields.
    PERFORM pg_catalog.set_config('lock_timeout', jobq._autovacuum_yield_timeout(), true);
    BEGIN
        EXECUTE format('LOCK TABLE jobq.%I IN EXCLUSIVE MODE', p_partition);
        IF EXISTS (SELECT FROM jobq._job_dep) THEN
            UPDATE jobq._job_archive AS a SET prune_after = now() + interval '1 hour'
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to
              AND EXISTS (SELECT FROM jobq._job_dep AS d
                          WHERE d.parent_id = a.id
                            AND (a.status <> 'completed' OR EXISTS (SELECT FROM jobq._job AS c WHERE c.id = d.child_id)));
        END IF;
        SELECT count(*) INTO v_count FROM jobq._job_archive AS a
        WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to;
        IF EXISTS (SELECT FROM jobq._job_error) THEN
            DELETE FROM jobq._job_error AS e
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to
              AND a.last_error IS NOT NULL AND e.job_id = a.id;
        END IF;
        IF EXISTS (SELECT FROM jobq._job_dep) THEN
            DELETE FROM jobq._job_dep AS d
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to AND d.child_id = a.id;
            DELETE FROM jobq._job_wait AS w
            USING jobq._job_archive AS a
            WHERE a.prune_after >= coalesce(p_from, '-infinity') AND a.prune_after < p_to AND w.job_id = a.id;
        END IF;
        EXECUTE format('DROP TABLE jobq.%I', p_partition);
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        RAISE NOTICE 'jobq: archive partition % is busy; the next prune drops it', p_partition;
        RETURN NULL;
    END;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION jobq._archive_drop(text, timestamptz, timestamptz) IS
    'Drops one expired archive partition with its jobs'' side rows (moving kept parents ahead); NULL when busy.';

CREATE FUNCTION jobq._archive_maintain() RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_day date;
    v_part record;
    v_dropped bigint := 0;
    v_count bigint;
BEGIN
    -- The archive's partitions: create the day partitions from today
    -- through the horizon (jobq._archive_horizon, plus a day), then drop
    -- those whose whole day has passed. Returns how many jobs the drops
    -- took. One session at a time: the SHARE UPDATE EXCLUSIVE lock of
    -- jobq._job_archive (which only roles that may change jobq tables can
    -- take) lets reads and writes of jobs go on; a concurrent prune skips.
    -- The archive ONLY, not its partitions: (auto)vacuum holds that same
    -- lock of each partition it works on, and must not make prune skip.
    BEGIN
        LOCK TABLE ONLY jobq._job_archive IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;
    END;
    FOR v_day IN
        SELECT d::date FROM generate_series((now() AT TIME ZONE 'UTC')::date,
                                            ((now() + jobq._archive_horizon()) AT TIME ZONE 'UTC')::date + 1,
                                            interval '1 day') AS d
    LOOP
        BEGIN
            PERFORM jobq._archive_add(v_day, v_day + 1);
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            RAISE NOTICE 'jobq: the archive''s default partition is busy; the next prune creates day %', v_day;
            EXIT;
        END;
    END LOOP;
    FOR v_part IN
        SELECT p.partition, p.from_time, p.to_time FROM jobq.archive_partitions AS p
        WHERE p.to_time <= now()
        ORDER BY p.to_time
    LOOP
        v_count := jobq._archive_drop(v_part.partition, v_part.from_time, v_part.to_time);
        v_dropped := v_dropped + coalesce(v_count, 0);
    END LOOP;
    RETURN v_dropped;
END
$$;
COMMENT ON FUNCTION jobq._archive_maintain() IS
    'Creates the archive''s day partitions ahead and drops the expired ones; returns how many jobs the drops took.';

CREATE FUNCTION jobq._taken_in_transaction(p_queue text) RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- How many jobs of p_queue this transaction took or holds (take, hold on
    -- the full path): they run inside it, so they hold concurrency slots
    -- until it ends. Read from jobq._taken, which only jobq's functions
    -- write: nothing a caller can set changes what a limit allows.
    SELECT coalesce(sum(t.n), 0)::integer
    FROM jobq._taken AS t
    WHERE t.xact = pg_current_xact_id_if_assigned() AND t.queue = p_queue
$$;
COMMENT ON FUNCTION jobq._taken_in_transaction(text) IS 'Jobs of a queue taken by take() in the current transaction.';

CREATE FUNCTION jobq._queue_list(p_literal text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The queue names of an array literal such as '{emails,sms}' that
    -- reached claim(text) untyped; JQ001 when it is not a valid literal.
    RETURN p_literal::text[];
EXCEPTION WHEN invalid_text_representation THEN
    RAISE EXCEPTION 'jobq: queue must be a queue name or an array literal of queue names, got %',
            pg_catalog.quote_literal(pg_catalog.left(p_literal, 200))
        USING ERRCODE = 'JQ001',
              HINT = 'Pass e.g. ''{emails,sms}'', or a text[] (in node-postgres: $1::text[] with a JS array).';
END
$$;
COMMENT ON FUNCTION jobq._queue_list(text) IS 'Parses an untyped array literal of queue names; JQ001 when malformed.';

CREATE FUNCTION jobq._check_claim_args(p_queues text[], p_n bigint, p_lease interval) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue record;
BEGIN
    -- Raise the JQ error of the first bad argument of a claim, take or hold:
    -- not READ COMMITTED, n, lease, or the queue list and each name in it.
    PERFORM jobq._check_read_committed();
    PERFORM jobq._check_batch(p_n, 'n', 1000);
    PERFORM jobq._check_interval(p_lease, 'lease', interval '1 second', interval '1 day');
    IF p_queues IS NULL OR cardinality(p_queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'jobq: queues must be an array of 1 to 100 queue names, got %',
                coalesce(cardinality(p_queues)::text || ' elements', 'NULL')
            USING ERRCODE = 'JQ001', HINT = 'Pass e.g. ARRAY[''emails'', ''sms''].';
    END IF;
    IF array_ndims(p_queues) > 1 THEN
        RAISE EXCEPTION 'jobq: queues must be a one-dimensional array, got % dimensions %',
                array_ndims(p_queues), array_dims(p_queues)
            USING ERRCODE = 'JQ001', HINT = 'Pass a list of names, e.g. ARRAY[''emails'', ''sms''].';
    END IF;
    -- By position: arrays may start at any index (a name is named by its subscript).
    FOR v_queue IN SELECT u.name, u.ord FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord) LOOP
        PERFORM jobq._check_queue(v_queue.name, format('queues[%s]', array_lower(p_queues, 1) + v_queue.ord - 1));
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._check_claim_args(text[], bigint, interval) IS
    'Raises the JQ error of the first bad claim/take/hold argument (isolation, n, lease, queue names).';

CREATE FUNCTION jobq._claim_args_ok(p_queues text[], p_n bigint, p_lease interval, p_worker text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Whether a claim's arguments are all good, in one expression (no
    -- query): the hot path asks this, and only a false sends it through the
    -- checks that name the bad argument (_check_claim_args, _check_worker,
    -- _check_queue), which this must never be more lenient than. Queue names
    -- are joined with spaces, a character no good name has; a bad name with
    -- a space in it shows in the count of spaces.
    RETURN coalesce(
        p_n BETWEEN 0 AND 1000
        AND (p_lease IS NULL
             OR (p_lease BETWEEN interval '1 second' AND interval '1 day'
                 AND date_part('month', p_lease) = 0 AND date_part('year', p_lease) = 0
                 AND date_part('day', p_lease) * (extract(epoch FROM p_lease) - date_part('day', p_lease) * 86400) >= 0))
        AND coalesce(char_length(p_worker), 0) <= 200
        AND cardinality(p_queues) BETWEEN 1 AND 100
        AND array_ndims(p_queues) = 1  -- before array_position, which refuses more dimensions
        AND array_position(p_queues, NULL) IS NULL
        AND array_to_string(p_queues, ' ') ~ '^[A-Za-z0-9_.:-]{1,128}( [A-Za-z0-9_.:-]{1,128})*$'
        AND char_length(array_to_string(p_queues, ' ')) - char_length(replace(array_to_string(p_queues, ' '), ' ', ''))
            = cardinality(p_queues) - 1
        AND current_setting('transaction_isolation') = 'read committed',
        false);
END
$$;
COMMENT ON FUNCTION jobq._claim_args_ok(text[], bigint, interval, text) IS
    'True when every claim argument is valid (the hot path''s one test; the _check functions name a bad one).';

CREATE FUNCTION jobq._plain_leases(p_queues text[], p_lease interval, OUT names text[], OUT leases interval[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_plain boolean;
    v_name text;
BEGIN
    -- When every queue of a claim is plain — not paused, no concurrency or
    -- rate limit, no serial-group job in it — their distinct names (first
    -- occurrence order) and leases (p_lease, else each queue's setting), for
    -- the one-statement fast path. NULLs otherwise: the claim takes the full
    -- path (jobq._pick). The arguments are already validated. The settings
    -- are read as jobq._settings reads them (its defaults, the queue's
    -- overrides), in this one statement: no call per queue; a claim of one
    -- queue (the common case) in a statement without aggregates.
    IF cardinality(p_queues) = 1 THEN
        v_name := p_queues[array_lower(p_queues, 1)];   -- arrays may start at any index
        SELECT ARRAY[v_name], ARRAY[coalesce(p_lease, s.lease, d.lease)],
               NOT coalesce(s.paused, d.paused) AND s.concurrency IS NULL AND s.rate_limit IS NULL
               AND NOT coalesce(s.fair, false)
               AND NOT EXISTS (SELECT FROM jobq._job AS g WHERE g.queue = v_name AND g.group_key IS NOT NULL)
        INTO names, leases, v_plain
        FROM jobq._queue_defaults AS d
        LEFT JOIN jobq._queue AS s ON s.queue = v_name;
    ELSE
        SELECT array_agg(u.name ORDER BY u.ord), array_agg(coalesce(p_lease, s.lease, d.lease) ORDER BY u.ord),
               bool_and(NOT coalesce(s.paused, d.paused) AND s.concurrency IS NULL AND s.rate_limit IS NULL
                        AND NOT coalesce(s.fair, false)
                        AND NOT EXISTS (SELECT FROM jobq._job AS g WHERE g.queue = u.name AND g.group_key IS NOT NULL))
        INTO names, leases, v_plain
        FROM (SELECT q.name, min(q.ord) AS ord
              FROM unnest(p_queues) WITH ORDINALITY AS q(name, ord)
              GROUP BY q.name) AS u
             CROSS JOIN jobq._queue_defaults AS d
             LEFT JOIN LATERAL (SELECT s.lease, s.paused, s.concurrency, s.rate_limit, s.fair
                                FROM jobq._queue AS s
                                WHERE s.queue = u.name
                                OFFSET 0) AS s ON true;  -- OFFSET 0: a probe of jobq._queue's key per queue
    END IF;
    IF NOT v_plain THEN
        names := NULL;
        leases := NULL;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._plain_leases(text[], interval) IS
    'Names and leases of the queues of a claim when all are plain (no pause, limits or groups); NULLs otherwise.';

CREATE FUNCTION jobq._crowded_queues(p_names text[], p_now timestamptz) RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    -- Older than this (and than the claiming transaction), a lease at the head is no passing one.
    c_stale CONSTANT interval := interval '50 milliseconds';
BEGIN
    -- Which of the plain queues p_names are crowded with leases: the first
    -- due entry of the queue's claim index is a job leased before the
    -- claiming transaction began and over 50 ms before p_now. The fast path
    -- leases in place (a HOT update: the row stays in the claim index until
    -- it ends, heartbeats or is parked by reap after 10 s), and every claim
    -- steps over the leased rows ahead of the ready ones. That is cheap
    -- while leases are short; when they are held longer (a thousand workers
    -- queueing behind PgBouncer for their acks, slow handlers, many
    -- workers) thousands pile up at the head and every claim pays for all
    -- of them. A claim on a crowded queue parks its own leases instead (out
    -- of the claim index, an ordinary update). Costs one index probe per
    -- queue; a head that is ready, scheduled, freshly leased or leased by
    -- this transaction keeps the HOT lease.
    RETURN ARRAY(
        SELECT q.name
        FROM unnest(p_names) AS q(name)
        WHERE EXISTS (
            SELECT
            FROM (SELECT h.status, h.started_at
                  FROM jobq._job AS h
                  WHERE h.queue = q.name AND NOT h.parked AND h.run_at <= now()
                  ORDER BY h.priority, h.run_at, h.id
                  LIMIT 1) AS head
            WHERE head.status = 'running' AND head.started_at < least(now(), p_now - c_stale)));
END
$$;
COMMENT ON FUNCTION jobq._crowded_queues(text[], timestamptz) IS
    'The plain queues whose claim index starts with a lease older than 50 ms (and than the transaction): their claims park.';

CREATE FUNCTION jobq._queue_slots(p_queue text, p_n integer,
                                  OUT slots integer, OUT lease interval, OUT rated boolean,
                                  OUT counted_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_settings jobq._queue := jobq._settings(p_queue);
BEGIN
    -- How many of p_n jobs jobq._pick may start now in queue p_queue
    -- (slots), under which lease setting, whether the queue is rate limited
    -- (rated: the caller records the starts), and the time they start at
    -- (counted_at: the clock read after the queue's lock, so that a claim
    -- counts and records its starts at a time no earlier than any start a
    -- claim before it recorded and no later than any after it; a time read
    -- before the lock let a claim that stalled in between count a window
    -- whose starts a newer claim had already deleted). None when
    -- paused, or when another claimer is counting this queue's slots: a
    -- limited queue's slots are counted under a row lock on its own
    -- jobq._queue row, taken with SKIP LOCKED (a busy queue yields no jobs,
    -- never a wait, and a crashed claimer's lock vanishes with its
    -- transaction; only jobq's roles can lock that row, where any role can
    -- take an advisory lock); each count runs in a statement that starts
    -- after the lock, so it sees every claim that committed before. Jobs
    -- taken earlier in this transaction (take, hold) count as running.
    slots := p_n;
    lease := v_settings.lease;
    rated := v_settings.rate_limit IS NOT NULL;
    IF v_settings.paused THEN
        slots := 0;
    ELSIF v_settings.concurrency IS NOT NULL OR v_settings.rate_limit IS NOT NULL THEN
        PERFORM FROM jobq._queue AS q WHERE q.queue = p_queue FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            slots := 0;   -- another claimer is counting this queue's slots right now
        END IF;
    END IF;
    counted_at := clock_timestamp();
    IF slots > 0 AND v_settings.concurrency IS NOT NULL THEN
        SELECT least(slots, v_settings.concurrency - count(*) - jobq._taken_in_transaction(p_queue))::integer
        INTO slots
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND j.parked AND j.status = 'running';
    END IF;
    IF slots > 0 AND v_settings.rate_limit IS NOT NULL THEN
        DELETE FROM jobq._rate_start AS r
        WHERE r.queue = p_queue AND r.started_at <= counted_at - v_settings.rate_interval;
        SELECT least(slots, v_settings.rate_limit - coalesce(sum(r.n), 0))::integer INTO slots
        FROM jobq._rate_start AS r
        WHERE r.queue = p_queue AND r.started_at > counted_at - v_settings.rate_interval;
    ELSE
        rated := false;
    END IF;
    slots := greatest(slots, 0);
END
$$;
COMMENT ON FUNCTION jobq._queue_slots(text, integer) IS
    'How many jobs jobq._pick may start now in a queue (pause, concurrency, rate limit), its lease, whether rate limited, and when they start.';

CREATE FUNCTION jobq._group_heads_only(p_ids bigint[], p_leases interval[], p_queues text[],
                                       OUT ids bigint[], OUT leases interval[], OUT queues text[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
BEGIN
    -- Of the jobs jobq._pick chose and row-locked (p_ids, with their leases
    -- and queues, in claim order), those that still head their serial group
    -- (or have none), checked again with a snapshot taken after the row
    -- locks: a claim of the same group that committed meanwhile is now
    -- visible. A job that goes ahead of older members not due yet also locks
    -- the group's oldest one (jobq._lock_group_head): every claim of the
    -- group locks that same row.
    SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
    INTO ids, leases, queues
    FROM unnest(p_ids, p_leases, p_queues) WITH ORDINALITY AS u(id, lease, queue, ord)
    JOIN jobq._job AS j ON j.id = u.id
    WHERE j.group_key IS NULL
       OR NOT EXISTS (SELECT FROM jobq._job AS g
                      WHERE g.queue = j.queue AND g.group_key = j.group_key AND g.id <> j.id
                        AND (g.status = 'running'
                             OR (g.id < j.id AND NOT (g.status = 'ready' AND g.run_at > now()
                                                      AND g.started_at IS NULL))));
    SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
    INTO ids, leases, queues
    FROM unnest(ids, leases, queues) WITH ORDINALITY AS u(id, lease, queue, ord)
    JOIN jobq._job AS j ON j.id = u.id
    WHERE j.group_key IS NULL OR jobq._lock_group_head(j.queue, j.group_key, j.id);
END
$$;
COMMENT ON FUNCTION jobq._group_heads_only(bigint[], interval[], text[]) IS
    'Of the jobs jobq._pick locked, those that still head their serial group (re-checked after the locks).';

CREATE FUNCTION jobq._pick_candidates(p_names text[], p_slots integer[], p_leases interval[], p_n integer,
                                       OUT ids bigint[], OUT leases interval[], OUT queues text[],
                                       OUT grouped boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
BEGIN
    -- jobq._pick's candidates, row-locked (SKIP LOCKED): up to p_n jobs
    -- across the queues p_names, at most p_slots[i] of queue i, most urgent
    -- first (priority, run_at, id), with each queue's lease (p_leases), and
    -- whether any belongs to a serial group (the caller re-checks those
    -- after the locks: jobq._group_heads_only). Per queue, its most urgent
    -- unlocked ready rows (one index scan each); a serial-group job only
    -- when it heads its group's due members and none runs (its row lock
    -- makes this transaction the group's only claimer of it). The group-head
    -- test is written here and in jobq._group_heads_only: inline, the
    -- planner runs it as an index probe per candidate; a helper function
    -- would cost a call per candidate row.
    SELECT array_agg(c.id ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.lease ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.queue ORDER BY c.priority, c.run_at, c.id),
           coalesce(bool_or(c.grouped), false)
    INTO ids, leases, queues, grouped
    FROM (
        SELECT c.id, c.priority, c.run_at, c.grouped, q.name AS queue, q.lease
        FROM unnest(p_names, p_slots, p_leases) AS q(name, slots, lease),
             LATERAL (
                 SELECT j.id, j.priority, j.run_at, j.group_key IS NOT NULL AS grouped
                 FROM jobq._job AS j
                 WHERE j.queue = q.name AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
                   AND (j.group_key IS NULL
                        OR NOT EXISTS (SELECT FROM jobq._job AS g
                                       WHERE g.queue = j.queue AND g.group_key = j.group_key AND g.id <> j.id
                                         AND (g.status = 'running'
                                              OR (g.id < j.id AND NOT (g.status = 'ready' AND g.run_at > now()
                                                                       AND g.started_at IS NULL)))))
                 ORDER BY j.priority, j.run_at, j.id
                 LIMIT q.slots
                 FOR UPDATE SKIP LOCKED
             ) AS c
        WHERE q.slots > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT p_n
    ) AS c;
END
$$;
COMMENT ON FUNCTION jobq._pick_candidates(text[], integer[], interval[], integer) IS
    'jobq._pick''s candidates: up to n ready jobs across queues within each queue''s slots, most urgent first, row-locked.';

CREATE FUNCTION jobq._pick(p_queues text[], p_n integer, p_lease interval)
RETURNS TABLE (id bigint, lease interval, started_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_queue text;
    v_slots record;
    v_names text[] := '{}';
    v_counted text[] := '{}';   -- every queue of the claim, fair or not
    v_starts timestamptz[] := '{}';   -- per queue of v_counted: when its jobs start (jobq._queue_slots)
    v_leases interval[] := '{}';
    v_allow integer[] := '{}';
    v_rated text[] := '{}';
    v_ids bigint[];
    v_jobs_queues text[];   -- per job of v_ids: its queue
    v_grouped boolean;
    v_settings jobq._queue;
    v_fair_ids bigint[] := '{}';
    v_fair_leases interval[] := '{}';
    v_fair_names text[] := '{}';
    v_got bigint[];
BEGIN
    -- The full claim path. Choose (and row-lock) up to p_n ready jobs across
    -- p_queues, most urgent first, that may start now: the queue is not
    -- paused, has a free concurrency slot and rate budget, and the job heads
    -- its serial group. Each queue's budget: jobq._queue_slots. Group heads
    -- are row-locked (SKIP LOCKED) and re-checked after the locks
    -- (jobq._group_heads_only). A group's order is among its due jobs: a member scheduled for
    -- later that never started does not hold back the members after it (a
    -- retry waiting for its backoff, a snoozed or a waiting member does),
    -- and one that goes ahead also locks the group's oldest member
    -- (jobq._lock_group_head), so that no two members ever run at once. The
    -- jobs this path leases are parked, so the count of a queue's
    -- running jobs is an index scan (waiting jobs are parked too, and
    -- skipped). Fair queues are served by jobq._fair_pick (round-robin
    -- across their fair keys), ahead of the claim's other queues. Returns
    -- each job's start time: its queue's, read after that queue's lock, at
    -- which the starts of a rate-limited queue are counted and recorded;
    -- the caller stamps it on the job (started_at), so that the rate limit
    -- holds over the jobs' own start times. Plans pinned as
    -- jobq._claim's (no sort, no bitmap scan of the backlog).
    PERFORM jobq._check_claim_args(p_queues, p_n, p_lease);
    FOR v_queue IN SELECT DISTINCT ON (u.name) u.name FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord)
                   ORDER BY u.name, u.ord LOOP
        v_slots := jobq._queue_slots(p_queue => v_queue, p_n => p_n);
        IF v_slots.rated THEN
            v_rated := v_rated || v_queue;
        END IF;
        v_counted := v_counted || v_queue;
        v_starts := v_starts || v_slots.counted_at;
        v_settings := jobq._settings(v_queue);
        IF v_settings.fair THEN
            -- A fair queue: round-robin across its keys (jobq._fair_pick),
            -- before the other queues of the claim, within its slots.
            v_got := (jobq._fair_pick(p_queue => v_queue,
                                      p_n => least(v_slots.slots, p_n - cardinality(v_fair_ids)),
                                      p_settings => v_settings, p_place => false)).ids;
            v_fair_ids := v_fair_ids || v_got;
            v_fair_leases := v_fair_leases || array_fill(coalesce(p_lease, v_slots.lease), ARRAY[cardinality(v_got)]);
            v_fair_names := v_fair_names || array_fill(v_queue, ARRAY[cardinality(v_got)]);
            CONTINUE;
        END IF;
        v_names := v_names || v_queue;
        v_leases := v_leases || coalesce(p_lease, v_slots.lease);
        v_allow := v_allow || v_slots.slots;
    END LOOP;

    IF cardinality(v_names) > 0 AND cardinality(v_fair_ids) < p_n THEN
        SELECT c.ids, c.leases, c.queues, c.grouped INTO v_ids, v_leases, v_jobs_queues, v_grouped
        FROM jobq._pick_candidates(p_names => v_names, p_slots => v_allow, p_leases => v_leases,
                                   p_n => p_n - cardinality(v_fair_ids)) AS c;
    ELSE
        v_ids := NULL;
        v_leases := NULL;
        v_jobs_queues := NULL;
        v_grouped := false;
    END IF;

    IF v_grouped THEN
        SELECT g.ids, g.leases, g.queues INTO v_ids, v_leases, v_jobs_queues
        FROM jobq._group_heads_only(p_ids => v_ids, p_leases => v_leases, p_queues => v_jobs_queues) AS g;
    END IF;

    v_ids := v_fair_ids || coalesce(v_ids, '{}');
    v_leases := v_fair_leases || coalesce(v_leases, '{}');
    v_jobs_queues := v_fair_names || coalesce(v_jobs_queues, '{}');

    IF cardinality(v_rated) > 0 THEN
        INSERT INTO jobq._rate_start (queue, started_at, n)
        SELECT r.queue, v_starts[array_position(v_counted, r.queue)], count(*)
        FROM unnest(v_jobs_queues) AS r(queue)
        WHERE r.queue = ANY (v_rated)
        GROUP BY r.queue;
    END IF;

    RETURN QUERY
    SELECT u.id, u.lease, v_starts[array_position(v_counted, u.queue)]
    FROM unnest(v_ids, v_leases, v_jobs_queues) AS u(id, lease, queue);
END
$$;
COMMENT ON FUNCTION jobq._pick(text[], integer, interval) IS
    'Row-locks up to n ready jobs that may start now (pause, concurrency, rate limit, serial groups honoured).';

CREATE FUNCTION jobq._lock_group_head(p_queue text, p_group_key text, p_id bigint) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_head bigint;
BEGIN
    -- Whether this transaction holds the row lock of the oldest live job of
    -- serial group p_group_key in p_queue: p_id itself (which the claim has
    -- locked), or an older member not due yet that p_id goes ahead of,
    -- locked here (SKIP LOCKED: false when another transaction holds it,
    -- never a wait). Every claim of a group job thus locks that one row, so
    -- that a member falling due meanwhile is not claimed beside p_id.
    SELECT g.id INTO v_head
    FROM jobq._job AS g
    WHERE g.queue = p_queue AND g.group_key = p_group_key
    ORDER BY g.id
    LIMIT 1;
    IF v_head IS NULL OR v_head = p_id THEN
        RETURN true;
    END IF;
    PERFORM FROM jobq._job AS g WHERE g.id = v_head FOR NO KEY UPDATE SKIP LOCKED;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq._lock_group_head(text, text, bigint) IS
    'Row-locks the oldest live job of a serial group (SKIP LOCKED) for a claim of a later member; false when another transaction holds it.';

---------------------------------------------------------------------------
-- 5. the live jobs at a glance: queue names, running jobs, counts
---------------------------------------------------------------------------
-- What jobq.reap, jobq.workers, jobq.stats and jobq.queues need to know
-- about the live table without reading every row of a backlog: each reads
-- an index, at most a bounded part of one, and the jobs it reads. Their
-- functions pin the plans (no sort, no bitmap, no sequential scan of the
-- live table), whatever the table's statistics say.

CREATE VIEW jobq._live_queues AS
    -- The queue names of the live jobs: a skip scan (one index probe per
    -- name) of the claim index and of the parked index, which between them
    -- hold every live job. Private: read jobq.queues or jobq.stats.
    WITH RECURSIVE unparked AS (
        (SELECT j.queue FROM jobq._job AS j WHERE NOT j.parked ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM jobq._job AS j WHERE NOT j.parked AND j.queue > u.queue ORDER BY j.queue LIMIT 1)
        FROM unparked AS u
        WHERE u.queue IS NOT NULL
    ), parked AS (
        (SELECT j.queue FROM jobq._job AS j WHERE j.parked ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM jobq._job AS j WHERE j.parked AND j.queue > p.queue ORDER BY j.queue LIMIT 1)
        FROM parked AS p
        WHERE p.queue IS NOT NULL
    )
    SELECT u.queue FROM unparked AS u WHERE u.queue IS NOT NULL
    UNION
    SELECT p.queue FROM parked AS p WHERE p.queue IS NOT NULL;
COMMENT ON VIEW jobq._live_queues IS 'The queue names of the live jobs (a skip scan of the claim and parked indexes). Private.';

CREATE VIEW jobq._dead_queues AS
    -- The queue names of the dead jobs in the history: a skip scan of the
    -- dead-job index of every archive partition. Private: read jobq.queues
    -- or jobq.stats.
    WITH RECURSIVE dead AS (
        (SELECT a.queue FROM jobq._job_archive AS a WHERE a.status = 'dead' ORDER BY a.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT a.queue FROM jobq._job_archive AS a
                WHERE a.status = 'dead' AND a.queue > d.queue ORDER BY a.queue LIMIT 1)
        FROM dead AS d
        WHERE d.queue IS NOT NULL
    )
    SELECT d.queue FROM dead AS d WHERE d.queue IS NOT NULL;
COMMENT ON VIEW jobq._dead_queues IS 'The queue names of the dead jobs in the history (a skip scan of its dead-job indexes). Private.';

CREATE FUNCTION jobq._leased_in_place(p_upto timestamptz)
RETURNS TABLE (id bigint, queue text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    -- Jobs read per step; a queue's walk ends after this many unleased due
    -- jobs, counted from the end of the last step that found a lease.
    c_step CONSTANT integer := 1000;
    v_queue text;
    v_priority integer;
    v_after_run_at timestamptz;
    v_after_id bigint;
    v_unleased integer;
    v_step record;
BEGIN
    -- The running jobs that are not parked (fast-path claims lease in
    -- place), without reading the backlog behind them. Such a lease sits in
    -- the claim index among the due jobs (run_at <= p_upto), where claims
    -- take jobs in order: priority, run_at, id. So each queue is walked in
    -- that order, one priority at a time, c_step jobs per step, and the walk
    -- ends once c_step due jobs in a row (whole steps) were not leased: claims reach a job
    -- only after every unleased job ahead of it, so a lease behind more than
    -- c_step of them (a job enqueued with an older run_at while it ran,
    -- released, or taken by a claim still in progress) is found once claims
    -- have caught up with it. Costs one index probe per queue and priority
    -- reached, and the leases plus at most c_step jobs per queue.
    FOR v_queue IN
        WITH RECURSIVE names AS (
            (SELECT j.queue FROM jobq._job AS j WHERE NOT j.parked ORDER BY j.queue LIMIT 1)
            UNION ALL
            SELECT (SELECT j.queue FROM jobq._job AS j WHERE NOT j.parked AND j.queue > n.queue
                    ORDER BY j.queue LIMIT 1)
            FROM names AS n
            WHERE n.queue IS NOT NULL
        )
        SELECT n.queue FROM names AS n WHERE n.queue IS NOT NULL
    LOOP
        v_unleased := 0;
        v_priority := -32769;
        LOOP
            SELECT j.priority INTO v_priority
            FROM jobq._job AS j
            WHERE j.queue = v_queue AND NOT j.parked AND j.priority > v_priority
            ORDER BY j.priority
            LIMIT 1;
            EXIT WHEN NOT FOUND;
            v_after_run_at := '-infinity';
            v_after_id := 0;
            LOOP
                SELECT count(*)::integer AS n,
                       array_agg(h.id) FILTER (WHERE h.status = 'running') AS leased,
                       max(h.run_at) AS last_run_at,
                       (array_agg(h.id ORDER BY h.run_at DESC, h.id DESC))[1] AS last_id
                INTO v_step
                FROM (SELECT j.id, j.run_at, j.status
                      FROM jobq._job AS j
                      WHERE j.queue = v_queue AND j.priority = v_priority AND NOT j.parked
                        AND j.run_at <= p_upto AND (j.run_at, j.id) > (v_after_run_at, v_after_id)
                      ORDER BY j.run_at, j.id
                      LIMIT c_step) AS h;
                IF v_step.leased IS NOT NULL THEN
                    RETURN QUERY SELECT u.id, v_queue FROM unnest(v_step.leased) AS u(id);
                    v_unleased := 0;
                ELSE
                    v_unleased := v_unleased + v_step.n;
                END IF;
                EXIT WHEN v_step.n < c_step OR v_unleased >= c_step;
                v_after_run_at := v_step.last_run_at;
                v_after_id := v_step.last_id;
            END LOOP;
            EXIT WHEN v_unleased >= c_step;
        END LOOP;
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._leased_in_place(timestamptz) IS
    'The running jobs not parked (leased in place by fast-path claims), found by walking each queue''s due jobs in claim order while leases turn up.';

CREATE FUNCTION jobq._running()
RETURNS TABLE (id bigint, queue text, worker text, started_at timestamptz, heartbeat_at timestamptz,
               lease_expires_at timestamptz, parked boolean)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET jit = off
AS $$
    -- Every running job, without reading the ready or waiting ones: the
    -- parked ones by their lease expiry index, those leased in place by
    -- jobq._leased_in_place. What jobq.workers shows (its readers,
    -- jobq_viewer, may call this; it reveals what jobq.jobs does).
    SELECT j.id, j.queue, j.worker, j.started_at, j.heartbeat_at, j.lease_expires_at, j.parked
    FROM jobq._job AS j
    WHERE j.parked_expires_at IS NOT NULL
    UNION ALL
    SELECT j.id, j.queue, j.worker, j.started_at, j.heartbeat_at, j.lease_expires_at, j.parked
    FROM jobq._leased_in_place(pg_catalog.clock_timestamp()) AS l
    JOIN jobq._job AS j ON j.id = l.id
    WHERE j.status = 'running' AND NOT j.parked
$$;
COMMENT ON FUNCTION jobq._running() IS
    'Every running job (parked ones by their expiry index, the others by jobq._leased_in_place), for jobq.workers.';

CREATE FUNCTION jobq._live_sample(p_now timestamptz)
RETURNS TABLE (queue text, ready double precision, scheduled double precision, waiting double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    -- The sample: this many runs of c_run_pages consecutive pages, evenly spread.
    c_runs CONSTANT integer := 32;
    c_run_pages CONSTANT integer := 8;
    v_pages bigint := pg_catalog.pg_relation_size('jobq._job'::regclass)
                      / current_setting('block_size')::bigint;
    v_scale double precision;
    v_from bigint;
BEGIN
    -- Estimated ready, scheduled and waiting jobs per queue of the live
    -- table, from a fixed number of its pages whatever its size (all of them
    -- when it has no more): c_runs runs of c_run_pages pages spread evenly
    -- over it, each read by its TID range, their jobs counted and scaled up
    -- to the table's size. Rows per queue and run; the caller sums them.
    -- For jobq._queue_counts, about the queues over its exact limit.
    IF v_pages <= c_runs * c_run_pages THEN
        RETURN QUERY
        SELECT j.queue, count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= p_now)::double precision,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > p_now)::double precision,
               count(*) FILTER (WHERE j.status = 'waiting')::double precision
        FROM jobq._job AS j
        WHERE j.ctid >= '(0,0)'::tid AND j.ctid < format('(%s,0)', v_pages + 1)::tid
        GROUP BY j.queue;
        RETURN;
    END IF;
    v_scale := v_pages::double precision / (c_runs * c_run_pages);
    FOR i IN 0 .. c_runs - 1 LOOP
        v_from := (2 * i + 1) * v_pages / (2 * c_runs) - c_run_pages / 2;
        RETURN QUERY
        SELECT j.queue, count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= p_now) * v_scale,
               count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > p_now) * v_scale,
               count(*) FILTER (WHERE j.status = 'waiting') * v_scale
        FROM jobq._job AS j
        WHERE j.ctid >= format('(%s,0)', v_from)::tid AND j.ctid < format('(%s,0)', v_from + c_run_pages)::tid
        GROUP BY j.queue;
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._live_sample(timestamptz) IS
    'Estimated ready, scheduled and waiting jobs per queue (rows to sum), from a fixed number of pages of the live table.';

CREATE FUNCTION jobq._queue_counts()
RETURNS TABLE (queue text, ready bigint, scheduled bigint, running bigint, waiting bigint, dead bigint,
               oldest_ready_age interval, estimated boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    -- Counted one by one up to this many per queue (live jobs in the claim
    -- index, parked jobs, dead jobs); above it, estimated from a sample.
    c_exact CONSTANT integer := 10000;
    -- Pages of the history read for an estimate of its dead jobs (a random sample).
    c_sample_pages CONSTANT integer := 256;
    v_now timestamptz := now();
    v_block bigint := current_setting('block_size')::bigint;
    v_dead_pct double precision;
BEGIN
    -- Per queue with live or dead jobs: jobs ready now, scheduled, running,
    -- waiting for their parents, dead in the history, and the age of the
    -- oldest ready job, at a cost that does not grow with the backlog.
    -- running and oldest_ready_age are always exact (jobq._running's
    -- sources, and one probe per queue and priority for the first ready
    -- job). The others are exact while a queue has at most c_exact jobs in
    -- each index they are counted from (index entries only: no table row is
    -- read for them); above that, ready, scheduled and waiting are estimated
    -- from a fixed sample of the live table (jobq._live_sample), dead from a
    -- random sample of about c_sample_pages pages of the history, and
    -- estimated is true. A sample is taken only when some queue needs it.
    -- The readers of jobq.stats (jobq_viewer) may call this.
    v_dead_pct := least(100, 100.0 * c_sample_pages
                             / greatest(1, (SELECT sum(pg_catalog.pg_relation_size(t.relid))
                                            FROM pg_catalog.pg_partition_tree('jobq._job_archive'::regclass) AS t)
                                           / v_block));
    RETURN QUERY
    WITH names AS (
        SELECT l.queue FROM jobq._live_queues AS l
        UNION
        SELECT d.queue FROM jobq._dead_queues AS d
    ), running AS (
        SELECT r.queue, count(*) FILTER (WHERE r.parked) AS parked, count(*) FILTER (WHERE NOT r.parked) AS unparked
        FROM (SELECT p.queue, true AS parked FROM jobq._job AS p WHERE p.parked_expires_at IS NOT NULL
              UNION ALL
              SELECT l.queue, false FROM jobq._leased_in_place(v_now) AS l) AS r
        GROUP BY r.queue
    ), pairs AS (
        -- (queue, priority) of the claim index, one probe each.
        SELECT n.queue, p.priority
        FROM names AS n,
             LATERAL (WITH RECURSIVE prio AS (
                          (SELECT j.priority FROM jobq._job AS j WHERE j.queue = n.queue AND NOT j.parked
                           ORDER BY j.priority LIMIT 1)
                          UNION ALL
                          SELECT (SELECT j.priority FROM jobq._job AS j
                                  WHERE j.queue = n.queue AND NOT j.parked AND j.priority > r.priority
                                  ORDER BY j.priority LIMIT 1)
                          FROM prio AS r
                          WHERE r.priority IS NOT NULL)
                      SELECT r.priority FROM prio AS r WHERE r.priority IS NOT NULL) AS p
    ), oldest AS (
        -- The first ready due job of each priority (stepping over the leases ahead of it).
        SELECT p.queue, min(f.run_at) AS run_at
        FROM pairs AS p,
             LATERAL (SELECT j.run_at FROM jobq._job AS j
                      WHERE j.queue = p.queue AND j.priority = p.priority AND NOT j.parked AND j.run_at <= v_now
                        AND j.status = 'ready'
                      ORDER BY j.run_at, j.id
                      LIMIT 1) AS f
        GROUP BY p.queue
    ), bounded AS (
        SELECT n.queue, e.due, e.later, e.entries, k.entries AS parked_entries, d.dead
        FROM names AS n,
             LATERAL (SELECT count(*) FILTER (WHERE x.run_at <= v_now) AS due,
                             count(*) FILTER (WHERE x.run_at > v_now) AS later, count(*) AS entries
                      FROM (SELECT j.run_at FROM jobq._job AS j WHERE j.queue = n.queue AND NOT j.parked
                            LIMIT c_exact + 1) AS x) AS e,
             LATERAL (SELECT count(*) AS entries
                      FROM (SELECT FROM jobq._job AS j WHERE j.queue = n.queue AND j.parked
                            LIMIT c_exact + 1) AS x) AS k,
             LATERAL (SELECT count(*) AS dead
                      FROM (SELECT FROM jobq._job_archive AS a WHERE a.queue = n.queue AND a.status = 'dead'
                            LIMIT c_exact + 1) AS x) AS d
    ), live_sample AS MATERIALIZED (
        SELECT s.queue, round(sum(s.ready))::bigint AS ready, round(sum(s.scheduled))::bigint AS scheduled,
               round(sum(s.waiting))::bigint AS waiting
        FROM jobq._live_sample(v_now) AS s
        GROUP BY s.queue
    ), dead_sample AS MATERIALIZED (
        SELECT a.queue, round(count(*) * 100 / v_dead_pct)::bigint AS dead
        FROM jobq._job_archive AS a TABLESAMPLE SYSTEM (v_dead_pct)
        WHERE a.status = 'dead'
        GROUP BY a.queue
    )
    SELECT b.queue,
           CASE WHEN b.entries > c_exact
                THEN coalesce((SELECT s.ready FROM live_sample AS s WHERE s.queue = b.queue), 0)
                ELSE greatest(b.due - coalesce(r.unparked, 0), 0) END,
           CASE WHEN b.entries > c_exact
                THEN coalesce((SELECT s.scheduled FROM live_sample AS s WHERE s.queue = b.queue), 0)
                ELSE b.later END,
           coalesce(r.parked + r.unparked, 0),
           CASE WHEN b.parked_entries > c_exact
                THEN coalesce((SELECT s.waiting FROM live_sample AS s WHERE s.queue = b.queue), 0)
                ELSE greatest(b.parked_entries - coalesce(r.parked, 0), 0) END,
           CASE WHEN b.dead > c_exact
                THEN greatest(coalesce((SELECT s.dead FROM dead_sample AS s WHERE s.queue = b.queue), 0), c_exact + 1)
                ELSE b.dead END,
           v_now - o.run_at,
           b.entries > c_exact OR b.parked_entries > c_exact OR b.dead > c_exact
    FROM bounded AS b
    LEFT JOIN running AS r ON r.queue = b.queue
    LEFT JOIN oldest AS o ON o.queue = b.queue;
END
$$;
COMMENT ON FUNCTION jobq._queue_counts() IS
    'Per queue with live or dead jobs: ready, scheduled, running, waiting and dead jobs and the oldest ready age; exact up to 10,000 jobs per index, estimated above (estimated true).';

---------------------------------------------------------------------------
-- 5. producer API
---------------------------------------------------------------------------

CREATE FUNCTION jobq.enqueue(
    queue text,
    payload jsonb,
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_key text DEFAULT NULL,
    group_key text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel',
    meta jsonb DEFAULT NULL,
    fair_key text DEFAULT NULL,
    on_duplicate text DEFAULT 'keep'
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_id bigint;
BEGIN
    -- Add one job in the caller's transaction; return its id (or the id of
    -- the active job that already holds job_key; with unique_for, also of
    -- the job of that key completed within unique_for). Jobs sharing a
    -- group_key run one at a time, in enqueue order. timeout (else the
    -- queue's timeout setting, fixed now) is how long a worker lets its
    -- handler run. depends_on: the job waits until those jobs completed;
    -- when one is dead or cancelled, on_parent_failure 'cancel' cancels it
    -- (and its own dependents), 'run' runs it once all have finished.
    -- meta: a JSON object kept beside the payload (tags, trace context),
    -- capped like it. fair_key: the key (tenant) a fair queue serves
    -- round-robin.
    -- on_duplicate (with job_key): 'keep' returns the holder of the key as
    -- said; 'replace' gives a waiting, ready or scheduled holder the new
    -- payload, meta, run_at and priority (debounce), 'replace_payload' only the
    -- payload and meta (throttle); a running holder is left as it is and hands the
    -- key to a new job (jobq._replace_job). A replaced job keeps its fair key.
    IF enqueue.job_key IS NULL AND enqueue.group_key IS NULL AND enqueue.timeout IS NULL
       AND enqueue.unique_for IS NULL AND enqueue.depends_on IS NULL
       AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel'
       AND enqueue.on_duplicate IS NOT DISTINCT FROM 'keep'
       AND jsonb_typeof(enqueue.payload) IS NOT DISTINCT FROM 'object'
       AND (enqueue.meta IS NULL OR jsonb_typeof(enqueue.meta) = 'object')
       AND jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                 NULL, NULL)
       AND (enqueue.fair_key IS NULL OR char_length(enqueue.fair_key) BETWEEN 1 AND 512) THEN
        -- The common case (no key, group, timeout or parents) in one
        -- statement: the queue's settings read in it, and no row when the
        -- payload (or meta) is over the queue's max_payload_bytes or some per-queue
        -- produce grant matches the queue; then the general path below
        -- raises the error, or checks the privilege and inserts. No key:
        -- nothing to conflict with. (Each helper call saved is a function
        -- call with pinned settings; a single-job enqueue pays them all.)
        INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, timeout, meta, fair_key)
        SELECT enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
               coalesce(enqueue.max_attempts, q.max_attempts, d.max_attempts), q.timeout, enqueue.meta,
               coalesce(enqueue.fair_key, CASE WHEN q.fair THEN '' END)
        FROM jobq._queue_defaults AS d
        LEFT JOIN jobq._queue AS q ON q.queue = enqueue.queue
        WHERE pg_column_size(enqueue.payload) <= coalesce(q.max_payload_bytes, d.max_payload_bytes)
          AND coalesce(pg_column_size(enqueue.meta), 0) <= coalesce(q.max_payload_bytes, d.max_payload_bytes)
          AND NOT EXISTS (SELECT FROM jobq._queue_grant AS g
                          WHERE g.privilege = 'produce' AND enqueue.queue LIKE g.queue_like)
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM pg_notify('jobq', enqueue.queue);
            RETURN v_id;
        END IF;
    END IF;
    v_settings := jobq._settings(enqueue.queue);
    IF NOT (jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                  enqueue.job_key, enqueue.group_key)
            AND coalesce(jsonb_typeof(enqueue.payload) = 'object'
                         AND pg_column_size(enqueue.payload) <= v_settings.max_payload_bytes, false)
            AND (enqueue.meta IS NULL
                 OR coalesce(jsonb_typeof(enqueue.meta) = 'object'
                             AND pg_column_size(enqueue.meta) <= v_settings.max_payload_bytes, false))
            AND enqueue.timeout IS NULL AND enqueue.unique_for IS NULL
            AND enqueue.depends_on IS NULL AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel'
            AND (enqueue.fair_key IS NULL OR char_length(enqueue.fair_key) BETWEEN 1 AND 512)
            AND NOT (v_settings.fair AND enqueue.group_key IS NOT NULL)
            AND coalesce(enqueue.on_duplicate = 'keep'
                         OR (enqueue.on_duplicate IN ('replace', 'replace_payload') AND enqueue.job_key IS NOT NULL),
                         false)) THEN
        PERFORM jobq._check_queue(enqueue.queue, 'queue');
        PERFORM jobq._check_payload(enqueue.payload, 'payload', v_settings.max_payload_bytes);
        PERFORM jobq._check_meta(enqueue.meta, 'meta', v_settings.max_payload_bytes);
        PERFORM jobq._check_time(enqueue.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue.priority, enqueue.max_attempts);
        PERFORM jobq._check_job_key(enqueue.job_key, 'job_key');
        PERFORM jobq._check_job_key(enqueue.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue.unique_for, enqueue.job_key IS NOT NULL, 'job_key');
        PERFORM jobq._check_dependencies(coalesce(enqueue.depends_on, '{}'), 'depends_on', enqueue.on_parent_failure);
        PERFORM jobq._check_fair_key(enqueue.fair_key, 'fair_key');
        PERFORM jobq._check_fair_grouping(v_settings.fair, enqueue.group_key);
        PERFORM jobq._check_on_duplicate(enqueue.on_duplicate, enqueue.job_key IS NOT NULL, 'job_key');
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue.queue LIKE g.queue_like);
    IF enqueue.on_duplicate <> 'keep' THEN
        -- Replace (a keyed job): the holder of the key changes unless it
        -- runs; depends_on applies only to a job inserted here (the
        -- parents of a replaced one stay, as with 'keep').
        IF coalesce(cardinality(enqueue.depends_on), 0) > 0 THEN
            PERFORM jobq._check_readable_jobs(enqueue.depends_on, 'depends_on');
            PERFORM jobq._check_parents_issued(enqueue.depends_on, 'depends_on');
        END IF;
        v_id := jobq._replace_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                                  coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                                  enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout),
                                  enqueue.unique_for, coalesce(cardinality(enqueue.depends_on), 0) > 0,
                                  enqueue.on_duplicate = 'replace_payload', enqueue.meta, enqueue.fair_key);
        IF coalesce(cardinality(enqueue.depends_on), 0) > 0 THEN
            PERFORM jobq._attach(ARRAY[v_id], enqueue.depends_on, enqueue.on_parent_failure, false);
        END IF;
        RETURN v_id;
    END IF;
    IF coalesce(cardinality(enqueue.depends_on), 0) = 0 THEN
        RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                                coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                                enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for,
                                false, enqueue.meta, enqueue.fair_key);
    END IF;
    PERFORM jobq._check_readable_jobs(enqueue.depends_on, 'depends_on');
    PERFORM jobq._check_parents_issued(enqueue.depends_on, 'depends_on');
    v_id := jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                             coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                             enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for,
                             true, enqueue.meta, enqueue.fair_key);
    PERFORM jobq._attach(ARRAY[v_id], enqueue.depends_on, enqueue.on_parent_failure, false);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text, jsonb, text, text) IS
    'Adds one job (inside the caller''s transaction) and returns its id; a job_key held by an active job (or, with unique_for, completed within it) returns that job''s id instead, on_duplicate replace/replace_payload updating it unless it runs; depends_on makes it wait for those jobs; meta is a JSON object kept beside the payload; fair_key the key a fair queue serves round-robin.';

CREATE FUNCTION jobq.enqueue_many(
    queue text,
    payloads jsonb[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    job_keys text[] DEFAULT NULL,
    group_key text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel',
    metas jsonb[] DEFAULT NULL,
    fair_keys text[] DEFAULT NULL,
    on_duplicate text DEFAULT 'keep'
) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_bad record;
    v_item record;
    v_n integer := coalesce(cardinality(enqueue_many.payloads), -1);
    v_ids bigint[] := '{}';
    v_waiting boolean := coalesce(cardinality(enqueue_many.depends_on), 0) > 0;
BEGIN
    -- Add many jobs to one queue in one statement; returns one id per
    -- payload, in payload order, and wakes the queue's workers once. With
    -- group_key, they join that serial group in payload order. timeout,
    -- unique_for, depends_on and on_parent_failure apply to every job, as in
    -- jobq.enqueue (unique_for to those with a key): with depends_on, every
    -- job waits for the same parents. metas: NULL, or one JSON object per
    -- payload, each job's meta (as jobq.enqueue's). fair_keys: one fair key
    -- (or NULL) per payload. on_duplicate applies to every job with a key,
    -- as in jobq.enqueue; a key repeated in one call: the last wins.
    IF NOT (jobq._enqueue_args_ok(enqueue_many.queue, enqueue_many.run_at, enqueue_many.priority,
                                  enqueue_many.max_attempts, NULL, enqueue_many.group_key)
            AND v_n BETWEEN 0 AND 100000 AND coalesce(array_ndims(enqueue_many.payloads), 1) = 1
            AND enqueue_many.timeout IS NULL AND enqueue_many.unique_for IS NULL
            AND enqueue_many.depends_on IS NULL AND enqueue_many.on_parent_failure IS NOT DISTINCT FROM 'cancel') THEN
        PERFORM jobq._check_enqueue_many_args(
            p_queue => enqueue_many.queue, p_payloads => enqueue_many.payloads, p_run_at => enqueue_many.run_at,
            p_priority => enqueue_many.priority, p_max_attempts => enqueue_many.max_attempts,
            p_job_keys => enqueue_many.job_keys, p_group_key => enqueue_many.group_key,
            p_timeout => enqueue_many.timeout, p_unique_for => enqueue_many.unique_for,
            p_depends_on => enqueue_many.depends_on, p_on_parent_failure => enqueue_many.on_parent_failure);
    END IF;
    IF enqueue_many.on_duplicate IS DISTINCT FROM 'keep' THEN
        PERFORM jobq._check_on_duplicate(enqueue_many.on_duplicate, enqueue_many.job_keys IS NOT NULL, 'job_keys');
    END IF;
    v_settings := jobq._settings(enqueue_many.queue);
    IF enqueue_many.fair_keys IS NOT NULL THEN
        PERFORM jobq._check_fair_keys(p_fair_keys => enqueue_many.fair_keys, p_n => v_n);
    END IF;
    IF v_settings.fair AND enqueue_many.group_key IS NOT NULL THEN
        PERFORM jobq._check_fair_grouping(v_settings.fair, enqueue_many.group_key);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue_many.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue_many.queue LIKE g.queue_like);

    SELECT p.payload, p.ord INTO v_bad
    FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
    WHERE p.payload IS NULL OR jsonb_typeof(p.payload) <> 'object'
       OR pg_column_size(p.payload) > v_settings.max_payload_bytes
    ORDER BY p.ord LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(v_bad.payload,  -- named by its own subscript
                                    format('payloads[%s]', array_lower(enqueue_many.payloads, 1) + v_bad.ord - 1),
                                    v_settings.max_payload_bytes);
    END IF;
    IF enqueue_many.metas IS NOT NULL THEN
        PERFORM jobq._check_metas(enqueue_many.metas, v_n, v_settings.max_payload_bytes);
    END IF;

    IF v_waiting THEN
        PERFORM jobq._check_readable_jobs(enqueue_many.depends_on, 'depends_on');
        PERFORM jobq._check_parents_issued(enqueue_many.depends_on, 'depends_on');
    END IF;
    IF enqueue_many.job_keys IS NULL AND NOT v_waiting THEN
        -- No keys: one INSERT. Identity values follow the ORDER BY, so
        -- sorting the returned ids gives payload order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout, meta, fair_key)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout), p.meta,
                   coalesce(enqueue_many.fair_keys[array_lower(enqueue_many.fair_keys, 1) + p.ord - 1],
                            (SELECT '' FROM jobq._queue AS q WHERE q.queue = enqueue_many.queue AND q.fair))
            FROM unnest(enqueue_many.payloads, enqueue_many.metas) WITH ORDINALITY AS p(payload, meta, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT ins.id FROM ins ORDER BY ins.id;
        PERFORM pg_notify('jobq', enqueue_many.queue);
        RETURN;
    END IF;
    IF enqueue_many.job_keys IS NULL THEN
        -- No keys, with parents: one INSERT of waiting jobs, then their links.
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout,
                                   status, parked, has_parents, meta, fair_key)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout), 'waiting', true, true, p.meta,
                   coalesce(enqueue_many.fair_keys[array_lower(enqueue_many.fair_keys, 1) + p.ord - 1],
                            (SELECT '' FROM jobq._queue AS q WHERE q.queue = enqueue_many.queue AND q.fair))
            FROM unnest(enqueue_many.payloads, enqueue_many.metas) WITH ORDINALITY AS p(payload, meta, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT coalesce(array_agg(ins.id ORDER BY ins.id), '{}') INTO v_ids FROM ins;
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
        RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
        RETURN;
    END IF;

    PERFORM jobq._check_job_keys(p_job_keys => enqueue_many.job_keys, p_n => v_n);
    FOR v_item IN
        SELECT x.payload, x.job_key, x.meta,
               enqueue_many.fair_keys[array_lower(enqueue_many.fair_keys, 1) + x.ord - 1] AS fair_key
        FROM unnest(enqueue_many.payloads, enqueue_many.job_keys, enqueue_many.metas)
             WITH ORDINALITY AS x(payload, job_key, meta, ord)
        ORDER BY x.ord
    LOOP
        IF enqueue_many.on_duplicate = 'keep' OR v_item.job_key IS NULL THEN
            v_ids := v_ids || jobq._insert_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                               enqueue_many.priority,
                                               coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                               v_item.job_key, enqueue_many.group_key,
                                               coalesce(enqueue_many.timeout, v_settings.timeout),
                                               enqueue_many.unique_for, v_waiting, v_item.meta, v_item.fair_key);
        ELSE
            v_ids := v_ids || jobq._replace_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                                enqueue_many.priority,
                                                coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                                v_item.job_key, enqueue_many.group_key,
                                                coalesce(enqueue_many.timeout, v_settings.timeout),
                                                enqueue_many.unique_for, v_waiting,
                                                enqueue_many.on_duplicate = 'replace_payload', v_item.meta,
                                                v_item.fair_key);
        END IF;
    END LOOP;
    IF v_waiting THEN
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text, jsonb[], text[], text) IS
    'Adds one job per payload in one call; returns their ids in payload order (existing ids for job_keys already held, updated with on_duplicate replace/replace_payload unless running); depends_on makes every one wait for those jobs; metas gives each its meta, fair_keys its fair key.';

CREATE FUNCTION jobq.enqueue_callback(
    queue text,
    payload jsonb,
    members bigint[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    meta jsonb DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_id bigint;
BEGIN
    -- Add a batch callback: a job that waits until every one of members
    -- (jobs of any queues) has finished — completed, dead or cancelled — and
    -- then becomes ready exactly once, its payload with "batch": {members,
    -- completed, dead, cancelled} (jobq's counts replace a "batch" key of
    -- the payload). Returns its id. A member retried (or restored by a
    -- retry) while the callback is released but not yet claimed puts it
    -- back to waiting, to be released once more with the new counts; once
    -- a worker has claimed it, a retried member does not release it again.
    -- meta: as jobq.enqueue's.
    v_settings := jobq._settings(enqueue_callback.queue);
    PERFORM jobq._check_queue(enqueue_callback.queue, 'queue');
    PERFORM jobq._check_payload(enqueue_callback.payload, 'payload', v_settings.max_payload_bytes);
    PERFORM jobq._check_meta(enqueue_callback.meta, 'meta', v_settings.max_payload_bytes);
    PERFORM jobq._check_time(enqueue_callback.run_at, 'run_at');
    PERFORM jobq._check_job_options(enqueue_callback.priority, enqueue_callback.max_attempts);
    PERFORM jobq._check_dependencies(enqueue_callback.members, 'members', 'run');
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue_callback.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue_callback.queue LIKE g.queue_like);
    PERFORM jobq._check_readable_jobs(enqueue_callback.members, 'members');
    PERFORM jobq._check_parents_issued(enqueue_callback.members, 'members');
    v_id := jobq._insert_job(enqueue_callback.queue, enqueue_callback.payload, enqueue_callback.run_at,
                             enqueue_callback.priority,
                             coalesce(enqueue_callback.max_attempts, v_settings.max_attempts), NULL, NULL,
                             v_settings.timeout, NULL, true, enqueue_callback.meta);
    PERFORM jobq._attach(ARRAY[v_id], enqueue_callback.members, 'run', true);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer, jsonb) IS
    'Adds a batch callback: a job released exactly once when all members have finished, with their completed/dead/cancelled counts in its payload.';

---------------------------------------------------------------------------
-- 6. worker API
---------------------------------------------------------------------------

CREATE FUNCTION jobq._claim(p_queues text[], p_n integer, p_worker text, p_lease interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_plain record;
    v_ids bigint[];
    v_leases interval[];
    v_parked boolean[];
    v_park text[];
    v_starts timestamptz[];   -- jobq._pick's start times (NULL on the plain path: v_now)
    v_now timestamptz;
    v_fair jobq._queue;
    v_calm text[];   -- the session's last calm verdict of the crowd probe (below)
    -- How long that verdict holds (seconds).
    c_calm_for CONSTANT double precision := 0.05;
    v_pile text[];   -- the pile the session's last claim of these queues stepped over (below)
    v_fetched bigint;
    -- A claim of more than 10 jobs parks behind a crowd only when its last
    -- claim read more than this many rows of the claim index per job.
    c_pile CONSTANT integer := 20;
BEGIN
    -- What both claim() overloads do once their arguments are checked:
    -- lease up to p_n ready jobs across p_queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured;
    -- fair queues round-robin across their fair keys.
    -- No sort and no bitmap scan (the SET clauses): whatever the table's
    -- statistics say (never analyzed, analyzed while empty), the candidates
    -- come from the claim index in its order, and reading stops after p_n.
    -- First which jobs (locked), under which lease, parked or not; then the
    -- one lease UPDATE.
    v_now := clock_timestamp();
    v_plain := jobq._plain_leases(p_queues, p_lease);
    IF v_plain.names IS NOT NULL THEN
        -- Plain queues: one statement picks (an index scan per queue). The
        -- lease writes no indexed column: a HOT update on the row's own
        -- page; the row stays in the claim index, and claims skip it by its
        -- status. On a queue crowded with older leases
        -- (jobq._crowded_queues) the lease parks the row instead, so that
        -- leases do not pile up ahead of every later claim.
        -- A claim of more than 10 jobs parks behind such a crowd only when
        -- the pile is large for its size. A claim steps over every lease in
        -- place ahead of it, about 0.75 us each, so a pile costs each job
        -- claimed its size divided by the claim's; parking costs each
        -- lease an update that is not HOT (new entries in the primary key
        -- and both parked indexes), about as much as stepping over 20. How
        -- large the pile is, the age of its head does not say (16 workers
        -- holding 100 leases each for 90 ms make a pile of 1,600; 1,000
        -- consumers behind PgBouncer, 10 each, about 6,500 when measured),
        -- so the claim measures it: the rows its scan of the claim index
        -- read (pg_stat_get_xact_tuples_fetched: the leases in place it
        -- stepped over, and its own), kept in the session
        -- (jobq.claim_pile: which queues, rows per job). A later claim of
        -- the same queues behind a crowd parks when that was over c_pile
        -- rows per job, or when the session has not measured yet; claims
        -- of up to 10 jobs park behind every crowd, as in 0.8.0. Like
        -- jobq.calm_queues, the setting is a hint.
        -- The probe walks the same dead index entries (completed jobs,
        -- until vacuum) as the claim's own scan: after a drain of a
        -- backlog, hundreds of pages. So a calm verdict is remembered in
        -- the session (jobq.calm_queues: when, in which transaction, which
        -- queues) and holds for this session's claims of the same queues
        -- in later transactions for c_calm_for: a queue crowds only with
        -- leases over 50 ms old, and a verdict that old answers as the
        -- probe would have that much earlier. A crowded verdict is never
        -- remembered. The setting is a hint: a forged one at most makes a
        -- session's claims lease in place.
        v_calm := string_to_array(current_setting('jobq.calm_queues', true), '|');
        IF cardinality(v_calm) = 3 AND v_calm[3] = array_to_string(v_plain.names, ' ')
           AND v_calm[2] <> extract(epoch FROM now())::text
           AND extract(epoch FROM v_now) - v_calm[1]::double precision BETWEEN 0 AND c_calm_for THEN
            v_park := '{}';
        ELSE
            v_park := jobq._crowded_queues(p_names => v_plain.names, p_now => v_now);
            PERFORM set_config('jobq.calm_queues',
                               CASE WHEN cardinality(v_park) = 0
                                    THEN concat_ws('|', extract(epoch FROM v_now), extract(epoch FROM now()),
                                                   array_to_string(v_plain.names, ' '))
                                    ELSE '' END,
                               false);
        END IF;
        IF p_n > 10 THEN
            v_pile := string_to_array(current_setting('jobq.claim_pile', true), '|');
            IF cardinality(v_park) > 0 AND cardinality(v_pile) = 2 AND v_pile[1] = array_to_string(v_plain.names, ' ')
               AND v_pile[2] ~ '^[0-9]{1,9}$' AND v_pile[2]::integer <= c_pile THEN
                v_park := '{}';
            END IF;
            v_fetched := pg_stat_get_xact_tuples_fetched('jobq._job_claim_idx'::regclass);
        END IF;
        -- Pick, lock and lease in one statement: the candidates of each
        -- queue from the claim index (SKIP LOCKED), the most urgent p_n of
        -- them as an array, then the lease UPDATE of those rows, joined
        -- from the array's unnest (a function scan: a nested loop over the
        -- primary key, never a hash join over a scan of the backlog).
        RETURN QUERY
        WITH leased AS (
            UPDATE jobq._job AS j
            SET status = 'running',
                parked = j.queue = ANY (v_park),
                attempts = j.attempts + 1,
                lease_token = gen_random_uuid(),
                lease_expires_at = v_now + v_plain.leases[array_position(v_plain.names, j.queue)],
                worker = p_worker,
                started_at = v_now
            FROM unnest(ARRAY(
                     SELECT c.id
                     FROM unnest(v_plain.names) AS q(name),
                          LATERAL (SELECT p.id, p.priority, p.run_at
                                   FROM jobq._job AS p
                                   WHERE p.queue = q.name AND NOT p.parked AND p.status = 'ready'
                                     AND p.run_at <= now() AND p.group_key IS NULL
                                   ORDER BY p.priority, p.run_at, p.id
                                   LIMIT p_n
                                   FOR UPDATE SKIP LOCKED) AS c
                     ORDER BY c.priority, c.run_at, c.id
                     LIMIT p_n)) AS p(id)
            WHERE j.id = p.id
            RETURNING j.*
        )
        SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
               l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key,
               l.timeout, l.progress, l.meta
        FROM leased AS l
        ORDER BY l.priority, l.run_at, l.id;
        IF p_n > 10 THEN
            PERFORM set_config('jobq.claim_pile',
                               concat_ws('|', array_to_string(v_plain.names, ' '),
                                         (pg_stat_get_xact_tuples_fetched('jobq._job_claim_idx'::regclass)
                                          - v_fetched) / p_n),
                               false);
        END IF;
        RETURN;
    ELSE
        IF cardinality(p_queues) = 1 THEN
            v_fair := jobq._settings(p_queues[1]);
        END IF;
        IF v_fair.fair AND NOT v_fair.paused AND v_fair.concurrency IS NULL AND v_fair.rate_limit IS NULL THEN
            -- One fair queue without queue limits: round-robin across its
            -- fair keys (jobq._fair_pick), straight. Its leases stay in
            -- place (a HOT update, as on the plain path) where reap and the
            -- live counts find them, near the head of the claim index
            -- (jobq._fair_window); the others are parked, and all of them
            -- with per_key_concurrency (running jobs per key are counted by
            -- the parked index).
            SELECT f.ids, f.parked INTO v_ids, v_parked
            FROM jobq._fair_pick(p_queue => p_queues[1], p_n => p_n, p_settings => v_fair,
                                 p_place => v_fair.per_key_concurrency IS NULL) AS f;
            v_leases := array_fill(coalesce(p_lease, v_fair.lease), ARRAY[cardinality(v_ids)]);
        ELSE
            -- Limits, pause, serial groups or fair queues among others:
            -- jobq._pick counts and locks. These leases are parked at once:
            -- limited queues count their running jobs by the parked index.
            -- jobq._pick also gives each job's start time (read after its
            -- queue's lock: rate limits count it).
            SELECT array_agg(p.id), array_agg(p.lease), array_agg(true), array_agg(p.started_at)
            INTO v_ids, v_leases, v_parked, v_starts
            FROM jobq._pick(p_queues => p_queues, p_n => p_n, p_lease => p_lease) AS p;
        END IF;
    END IF;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobq._job AS j
        SET status = 'running',
            parked = p.parked,
            attempts = j.attempts + 1,
            lease_token = gen_random_uuid(),
            lease_expires_at = coalesce(p.started_at, v_now) + p.lease,
            worker = p_worker,
            started_at = coalesce(p.started_at, v_now)
        FROM unnest(v_ids, v_leases, v_parked, v_starts) AS p(id, lease, parked, started_at)
        WHERE j.id = p.id
        RETURNING j.*
    )
    SELECT l.id, l.queue, l.payload, l.priority::integer, l.attempts, l.max_attempts, l.run_at,
           l.created_at, l.lease_token, l.lease_expires_at, l.worker, l.job_key, l.last_error, l.group_key,
           l.timeout, l.progress, l.meta
    FROM leased AS l
    ORDER BY l.priority, l.run_at, l.id;
END
$$;
COMMENT ON FUNCTION jobq._claim(text[], integer, text, interval) IS
    'The claim itself (arguments already checked): fast path for plain queues, jobq._pick otherwise.';

CREATE FUNCTION jobq.claim(
    queue text,
    n bigint DEFAULT 1,
    worker text DEFAULT NULL,
    lease interval DEFAULT NULL
) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Lease up to n ready jobs of one queue: priority, then run_at, then id.
    IF NOT jobq._claim_args_ok(ARRAY[claim.queue], claim.n, claim.lease, claim.worker) THEN
        IF claim.queue LIKE '{%}' THEN
            -- An array literal that came untyped (node-postgres sends every
            -- parameter untyped, and PostgreSQL resolves an untyped argument
            -- to this text overload). No queue name has a brace: claim across
            -- the queues it lists.
            RETURN QUERY SELECT * FROM jobq.claim(jobq._queue_list(claim.queue), claim.n, claim.worker, claim.lease);
            RETURN;
        END IF;
        PERFORM jobq._check_queue(claim.queue, 'queue');
        PERFORM jobq._check_worker(claim.worker);
        PERFORM jobq._check_claim_args(ARRAY[claim.queue], claim.n, claim.lease);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[claim.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND claim.queue LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._claim(ARRAY[claim.queue], claim.n::integer, claim.worker, claim.lease);
END
$$;
COMMENT ON FUNCTION jobq.claim(text, bigint, text, interval) IS
    'Leases up to n ready jobs of a queue (FOR UPDATE SKIP LOCKED), most urgent first; ''{a,b}'' claims across queues a and b.';

CREATE FUNCTION jobq.claim(
    queues text[],
    n bigint DEFAULT 1,
    worker text DEFAULT NULL,
    lease interval DEFAULT NULL
) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Lease up to n ready jobs across several queues, most urgent first
    -- (priority, run_at, id), each under its queue's lease unless given;
    -- paused queues, concurrency and rate limits and serial groups honoured.
    IF NOT jobq._claim_args_ok(claim.queues, claim.n, claim.lease, claim.worker) THEN
        PERFORM jobq._check_worker(claim.worker);
        PERFORM jobq._check_claim_args(claim.queues, claim.n, claim.lease);
    END IF;
    PERFORM jobq._check_queue_privilege(claim.queues, 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g, unnest(claim.queues) AS q(name)
                      WHERE g.privilege = 'consume' AND q.name LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._claim(claim.queues, claim.n::integer, claim.worker, claim.lease);
END
$$;
COMMENT ON FUNCTION jobq.claim(text[], bigint, text, interval) IS
    'Leases up to n ready jobs across several queues (FOR UPDATE SKIP LOCKED), most urgent first.';

CREATE FUNCTION jobq._lock_ready(p_queue text, p_n integer) RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    -- Row-lock up to n ready jobs of one queue for work inside the caller's
    -- transaction (take, hold), most urgent first, as that transaction sees
    -- them: no lease, this attempt counted. One index scan on a plain queue
    -- (in the claim index's order, whatever the statistics: no sort, no
    -- bitmap scan), the full path (jobq._pick) otherwise; then the jobs hold
    -- their queue's concurrency slots until the transaction ends. Arguments
    -- are already validated.
    IF (jobq._plain_leases(ARRAY[p_queue], NULL)).names IS NOT NULL THEN
        RETURN QUERY
        SELECT j.id, j.queue, j.payload, j.priority::integer, j.attempts + 1, j.max_attempts, j.run_at,
               j.created_at, NULL::uuid, NULL::timestamptz, session_user::text, j.job_key, j.last_error,
               j.group_key, j.timeout, j.progress, j.meta
        FROM jobq._job AS j
        WHERE j.queue = p_queue AND NOT j.parked AND j.status = 'ready' AND j.run_at <= now()
          AND j.group_key IS NULL
        ORDER BY j.priority, j.run_at, j.id
        LIMIT p_n
        FOR UPDATE SKIP LOCKED;
        RETURN;
    END IF;
    SELECT array_agg(p.id) INTO v_ids FROM jobq._pick(ARRAY[p_queue], p_n, NULL) AS p;
    IF cardinality(v_ids) > 0 THEN
        INSERT INTO jobq._taken (queue, n) VALUES (p_queue, cardinality(v_ids));
    END IF;
    RETURN QUERY
    SELECT j.id, j.queue, j.payload, j.priority::integer, j.attempts + 1, j.max_attempts, j.run_at,
           j.created_at, NULL::uuid, NULL::timestamptz, session_user::text, j.job_key, j.last_error, j.group_key,
           j.timeout, j.progress, j.meta
    FROM jobq._job AS j
    WHERE j.id = ANY (v_ids)
    ORDER BY j.priority, j.run_at, j.id;
END
$$;
COMMENT ON FUNCTION jobq._lock_ready(text, integer) IS
    'Row-locks up to n ready jobs of a queue for in-transaction work (take, hold); limits and groups honoured.';

CREATE FUNCTION jobq.take(queue text, n bigint DEFAULT 1) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
BEGIN
    -- Exactly-once processing for work that only touches this database:
    -- remove up to n ready jobs inside the caller's transaction, without a
    -- lease. Commit and they are done (counted as completed) together with
    -- the caller's writes; roll back, or crash, and they are back,
    -- untouched. (To fail jobs one by one, use hold.) The rows stay locked
    -- (and, for limited queues, the queue's slots held) until then.
    IF NOT jobq._claim_args_ok(ARRAY[take.queue], take.n, NULL, NULL) THEN
        PERFORM jobq._check_queue(take.queue, 'queue');
        PERFORM jobq._check_claim_args(ARRAY[take.queue], take.n, NULL);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[take.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND take.queue LIKE g.queue_like);
    RETURN QUERY
    WITH held AS (
        SELECT * FROM jobq._lock_ready(take.queue, take.n::integer)
    ), done AS (
        SELECT count(*) FROM jobq._finish(p_ids => ARRAY(SELECT h.id FROM held AS h), p_lease_tokens => NULL,
                                               p_status => 'completed', p_error => NULL, p_held => true)
    )
    SELECT h.* FROM held AS h, done ORDER BY h.priority, h.run_at, h.id;
END
$$;
COMMENT ON FUNCTION jobq.take(text, bigint) IS
    'Removes up to n ready jobs inside the caller''s transaction: done on commit, back untouched on rollback.';

CREATE FUNCTION jobq.hold(queue text, n bigint DEFAULT 1) RETURNS SETOF jobq.job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- In-transaction processing, job by job: row-lock up to n ready jobs for
    -- the caller's transaction, writing nothing (no lease). Acknowledge each
    -- before the commit with jobq.complete_held() or jobq.fail_held(); a job
    -- neither acknowledged, and every job of a transaction that rolls back
    -- or crashes, stays ready, untouched. attempts shows this attempt.
    IF NOT jobq._claim_args_ok(ARRAY[hold.queue], hold.n, NULL, NULL) THEN
        PERFORM jobq._check_queue(hold.queue, 'queue');
        PERFORM jobq._check_claim_args(ARRAY[hold.queue], hold.n, NULL);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[hold.queue], 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'consume' AND hold.queue LIKE g.queue_like);
    RETURN QUERY SELECT * FROM jobq._lock_ready(hold.queue, hold.n::integer);
END
$$;
COMMENT ON FUNCTION jobq.hold(text, bigint) IS
    'Row-locks up to n ready jobs for the caller''s transaction (no lease); acknowledge with complete_held / fail_held.';

CREATE FUNCTION jobq.complete_held(ids bigint[], results jsonb[] DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_done integer;
    v_ids bigint[] := complete_held.ids;
BEGIN
    -- Acknowledge success of jobs this transaction holds (jobq.hold): they
    -- are done when it commits. Returns how many it completed; leased,
    -- finished and unknown ids, and jobs another transaction holds, are left
    -- alone (never waited for). results: each job's result (or NULL), as
    -- in jobq.complete_many.
    IF array_ndims(complete_held.ids) > 1 THEN
        RAISE EXCEPTION 'jobq: ids must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_held.ids), array_dims(complete_held.ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass a list of the ids jobq.hold() returned.';
    END IF;
    IF complete_held.ids IS NULL OR array_position(complete_held.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids must be an array of job ids without NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the ids of the jobs jobq.hold() returned.';
    END IF;
    PERFORM jobq._check_batch(cardinality(complete_held.ids), 'cardinality(ids)', 10000);
    IF complete_held.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_held.ids, complete_held.results);
    END IF;
    IF EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'consume') THEN
        -- A job of a queue the caller may not consume is left alone, as an unknown id is.
        v_ids := ARRAY(SELECT CASE WHEN jobq._job_allowed(u.id, 'consume') THEN u.id END
                       FROM unnest(complete_held.ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(p_ids => v_ids, p_lease_tokens => NULL, p_status => 'completed', p_error => NULL,
                      p_held => true, p_results => complete_held.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_held(bigint[], jsonb[]) IS
    'Marks jobs held by this transaction done (on commit), with their results; returns how many; never waits for another holder.';

CREATE FUNCTION jobq._retry_or_bury(p_job jobq._job, p_attempt integer, p_error text, p_worker text,
                                    p_retry_at timestamptz, p_held boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue;
    v_run_at timestamptz;
BEGIN
    -- The failed attempt p_attempt of p_job, which the caller has locked
    -- (jobq.fail: under its lease; jobq.fail_held: held by this transaction,
    -- p_held, and this is its attempt): counted, its error (p_error, already
    -- bounded) kept in the job's history under p_worker; then dead letter
    -- when that was its last attempt, else ready again after exponential
    -- backoff with jitter (or at p_retry_at), unleased, and its queue's
    -- workers woken when that helps a claim (below).
    INSERT INTO jobq._counter (queue, bucket, failed) VALUES (p_job.queue, date_trunc('minute', now()), 1);
    PERFORM jobq._record_errors(p_ids => ARRAY[p_job.id], p_attempts => ARRAY[p_attempt],
                                p_errors => ARRAY[p_error], p_workers => ARRAY[p_worker]);
    IF p_attempt >= p_job.max_attempts THEN
        PERFORM jobq._finish(p_ids => ARRAY[p_job.id], p_lease_tokens => ARRAY[p_job.lease_token],
                             p_status => 'dead', p_error => p_error, p_held => p_held);
        RETURN;
    END IF;
    v_settings := jobq._settings(p_job.queue);
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        attempts = p_attempt,
        run_at = coalesce(p_retry_at,
                          now() + jobq._backoff_delay(p_attempt, v_settings.backoff_base,
                                                      v_settings.backoff_cap, v_settings.backoff_jitter,
                                                      random())),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL,
        last_error = p_error,
        worker = p_worker,
        started_at = CASE WHEN p_held THEN clock_timestamp() ELSE j.started_at END
    WHERE j.id = p_job.id
    RETURNING j.run_at INTO v_run_at;
    -- Wake the queue's workers only when a claim can gain by it: the retry is
    -- due now, or the failure freed a concurrency slot or its serial group's
    -- turn. A retry in backoff waits for the workers' next look (jobq.next_run_at).
    IF v_run_at <= now() OR v_settings.concurrency IS NOT NULL OR p_job.group_key IS NOT NULL THEN
        PERFORM pg_notify('jobq', p_job.queue);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._retry_or_bury(jobq._job, integer, text, text, timestamptz, boolean) IS
    'A failed attempt of a locked job, for fail and fail_held: counted, its error kept, then dead letter or a retry after backoff.';

CREATE FUNCTION jobq.fail_held(id bigint, error text, retry_at timestamptz DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_error text := jobq._error_text(fail_held.error);
BEGIN
    -- Record a failed attempt of a job this transaction holds (jobq.hold):
    -- it retries after backoff (or at retry_at), or goes to dead letter when
    -- its attempts are used up, as jobq.fail() does for a leased job (the
    -- error joins the job's error history, worker session_user). False
    -- (and no change) when the job is not ready and due (hold took only
    -- those; a job failed once already waits for its retry), or another
    -- transaction holds it.
    IF fail_held.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id of a job jobq.hold() returned.';
    END IF;
    PERFORM jobq._check_error(fail_held.error);
    IF fail_held.retry_at IS NOT NULL THEN
        PERFORM jobq._check_time(fail_held.retry_at, 'retry_at');
    END IF;
    IF NOT jobq._job_allowed(fail_held.id, 'consume') THEN
        RETURN false;   -- a job of a queue the caller may not consume: as if another transaction held it
    END IF;
    BEGIN
        SELECT * INTO v_job FROM jobq._job AS j
        WHERE j.id = fail_held.id AND j.status = 'ready' AND j.run_at <= now()
        FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM jobq._retry_or_bury(p_job => v_job, p_attempt => v_job.attempts + 1, p_error => v_error,
                                p_worker => session_user, p_retry_at => fail_held.retry_at, p_held => true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail_held(bigint, text, timestamptz) IS
    'Records a failed attempt of a job held by this transaction (backoff or dead letter); false when not held.';

CREATE FUNCTION jobq.complete(id bigint, lease_token uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    -- Acknowledge success of a job still held under lease_token, with its
    -- result (any JSON value; jobq.result() returns it, the job's children
    -- read it with jobq.parent_results()). False (and no change) when the
    -- lease was lost or the id is unknown; JQ003 for a result over the
    -- queue's max_payload_bytes.
    PERFORM jobq._check_lease_args(complete.id, complete.lease_token);
    IF complete.result IS NULL THEN
        RETURN EXISTS (
            SELECT FROM jobq._finish(p_ids => ARRAY[complete.id], p_lease_tokens => ARRAY[complete.lease_token],
                                     p_status => 'completed', p_error => NULL));
    END IF;
    PERFORM jobq._check_results(ARRAY[complete.id], ARRAY[complete.result]);
    RETURN EXISTS (
        SELECT FROM jobq._finish(p_ids => ARRAY[complete.id], p_lease_tokens => ARRAY[complete.lease_token],
                                 p_status => 'completed', p_error => NULL, p_results => ARRAY[complete.result]));
END
$$;
COMMENT ON FUNCTION jobq.complete(bigint, uuid, jsonb) IS
    'Marks a job done (with its result) if still held under lease_token; false when the lease was lost or the id is unknown.';

CREATE FUNCTION jobq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_done integer;
BEGIN
    -- Acknowledge many jobs in one statement; returns how many were still
    -- held under their lease tokens (the others are left alone). results:
    -- one result (or NULL) per job, as in jobq.complete; JQ003 (and nothing
    -- completed) when one is over its queue's max_payload_bytes.
    IF array_ndims(complete_many.ids) > 1 THEN
        RAISE EXCEPTION 'jobq: ids must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_many.ids), array_dims(complete_many.ids)
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, as two lists.';
    END IF;
    IF array_ndims(complete_many.lease_tokens) > 1 THEN
        RAISE EXCEPTION 'jobq: lease_tokens must be a one-dimensional array, got % dimensions %',
                array_ndims(complete_many.lease_tokens), array_dims(complete_many.lease_tokens)
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, as two lists.';
    END IF;
    IF complete_many.ids IS NULL OR complete_many.lease_tokens IS NULL
       OR cardinality(complete_many.ids) <> cardinality(complete_many.lease_tokens) THEN
        RAISE EXCEPTION 'jobq: ids and lease_tokens must be arrays of the same length'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job, in the same order.';
    END IF;
    IF cardinality(complete_many.ids) > 10000 THEN
        PERFORM jobq._check_batch(cardinality(complete_many.ids), 'cardinality(ids)', 10000);
    END IF;
    IF array_position(complete_many.ids, NULL) IS NOT NULL
       OR array_position(complete_many.lease_tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: ids and lease_tokens must not contain NULL'
            USING ERRCODE = 'JQ010', HINT = 'Pass the id and lease_token of each claimed job.';
    END IF;
    IF complete_many.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_many.ids, complete_many.results);
    END IF;
    SELECT count(*) INTO v_done
    FROM jobq._finish(p_ids => complete_many.ids, p_lease_tokens => complete_many.lease_tokens, p_status => 'completed',
                      p_error => NULL, p_results => complete_many.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_many(bigint[], uuid[], jsonb[]) IS
    'Marks many jobs done in one statement (with their results); returns how many were still held under their lease tokens.';

CREATE FUNCTION jobq.fail(id bigint, error text, lease_token uuid, retry_at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_error text := jobq._error_text(fail.error);
BEGIN
    -- Record a failed attempt of a job held under lease_token: retry after
    -- exponential backoff with jitter (or at retry_at), or dead-letter it when
    -- its attempts are used up. The error joins the job's error history
    -- (jobq.job_errors). False (and no change) when the lease was lost.
    PERFORM jobq._check_lease_args(fail.id, fail.lease_token);
    PERFORM jobq._check_error(fail.error);
    IF fail.retry_at IS NOT NULL THEN
        PERFORM jobq._check_time(fail.retry_at, 'retry_at');
    END IF;

    SELECT * INTO v_job FROM jobq._job AS j
    WHERE j.id = fail.id AND j.lease_token = fail.lease_token
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM jobq._retry_or_bury(p_job => v_job, p_attempt => v_job.attempts, p_error => v_error,
                                p_worker => v_job.worker, p_retry_at => fail.retry_at, p_held => false);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail(bigint, text, uuid, timestamptz) IS
    'Records a failure: retries after backoff (or at retry_at) or dead-letters when out of attempts; false when the lease was lost.';

CREATE FUNCTION jobq.heartbeat(id bigint, lease_token uuid, extend interval DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Extend the lease of a job still held under lease_token to now() +
    -- extend (default: the queue's lease), and note the time (heartbeat_at).
    -- False when the lease was lost. A job that lives to be heart-beaten is
    -- long-running: it is parked (out of the claim index), so claims do not
    -- step over it while it runs.
    PERFORM jobq._check_lease_args(heartbeat.id, heartbeat.lease_token);
    PERFORM jobq._check_interval(heartbeat.extend, 'extend', interval '1 second', interval '1 day');
    UPDATE jobq._job AS j
    SET lease_expires_at = clock_timestamp()
                           + coalesce(heartbeat.extend, (jobq._settings(j.queue)).lease),
        heartbeat_at = clock_timestamp(),
        parked = true
    WHERE j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token
    RETURNING j.queue INTO v_queue;
    RETURN v_queue IS NOT NULL;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat(bigint, uuid, interval) IS
    'Extends a lease held under lease_token; false when the lease was lost.';

CREATE FUNCTION jobq.progress(id bigint, lease_token uuid, progress jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
    v_held boolean;
    v_cap integer;
BEGIN
    -- Store the progress of a job still held under lease_token: any JSON
    -- value (NULL clears it), shown by jobq.jobs and returned by the next
    -- claim of the job. False, changing nothing, when the lease was lost or
    -- the job is not running (as jobq.heartbeat); JQ003 when the value is
    -- over its queue's max_payload_bytes. It extends no lease.
    PERFORM jobq._check_lease_args(progress.id, progress.lease_token);
    SELECT j.queue, j.lease_token IS NOT DISTINCT FROM progress.lease_token INTO v_queue, v_held
    FROM jobq._job AS j
    WHERE j.id = progress.id;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    v_cap := (jobq._settings(v_queue)).max_payload_bytes;
    IF pg_column_size(progress.progress) > v_cap THEN
        RAISE EXCEPTION 'jobq: progress is % bytes, over the queue''s cap of % bytes',
                pg_column_size(progress.progress), v_cap
            USING ERRCODE = 'JQ003',
                  HINT = 'Report a small value (a count, a percentage, a stage name); keep large data in a table.';
    END IF;
    IF NOT v_held THEN
        RETURN false;
    END IF;
    UPDATE jobq._job AS j
    SET progress = progress.progress
    WHERE j.id = progress.id AND j.lease_token = progress.lease_token;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq.progress(bigint, uuid, jsonb) IS
    'Stores the progress (a small JSON value) of a job held under lease_token; false when the lease was lost.';

CREATE FUNCTION jobq.release(id bigint, lease_token uuid) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Hand a claimed job back untouched (a worker shutting down with jobs it
    -- never started): ready again at its old run_at, the attempt not spent.
    -- False when the lease was lost.
    PERFORM jobq._check_lease_args(release.id, release.lease_token);
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        attempts = greatest(j.attempts - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL
    WHERE j.id = release.id AND j.lease_token = release.lease_token
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.release(bigint, uuid) IS
    'Returns a claimed job to the queue without spending an attempt; false when the lease was lost.';

CREATE FUNCTION jobq.snooze(id bigint, lease_token uuid, run_at timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_queue text;
BEGIN
    -- A worker reschedules the job it holds to run_at, without spending an
    -- attempt (not a failure: e.g. "the report is not ready yet").
    -- False when the lease was lost.
    PERFORM jobq._check_lease_args(snooze.id, snooze.lease_token);
    PERFORM jobq._check_time(snooze.run_at, 'run_at');
    UPDATE jobq._job AS j
    SET status = 'ready',
        parked = false,
        run_at = snooze.run_at,
        attempts = greatest(j.attempts - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL,
        heartbeat_at = NULL
    WHERE j.id = snooze.id AND j.lease_token = snooze.lease_token
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    -- A freed slot or group, or a run_at already due: let workers look.
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.snooze(bigint, uuid, timestamptz) IS
    'Reschedules a held job to run_at without spending an attempt; false when the lease was lost.';

CREATE FUNCTION jobq.reap(n integer DEFAULT 10000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    v_leased bigint[];
    v_retry bigint[];
    v_dead bigint[];
    v_queues text[];
BEGIN
    -- Return up to n jobs whose lease expired to the queue (ready now), or
    -- dead-letter those whose attempts are used up; each counts as a failed
    -- attempt. Concurrent reapers skip each other's rows, so they never
    -- block or deadlock. The job's previous error is kept after the
    -- lease-expiry note in last_error; the note alone joins its error
    -- history. The ready and waiting jobs are never read, so a reap with
    -- nothing to do costs the same with a backlog of a million: parked
    -- leases are found by their expiry index, leases in place (no index
    -- covers them: claims stay HOT) at the head of their queue's claim order
    -- (jobq._leased_in_place). Leases held for over 10 seconds are parked
    -- (out of the claim index). Also folds the counters and forgets the
    -- take bookkeeping of finished transactions, so they stay small where
    -- pg_cron does not run prune().
    PERFORM jobq._check_batch(reap.n, 'n', 1000000);
    v_leased := ARRAY(SELECT l.id FROM jobq._leased_in_place(clock_timestamp()) AS l);
    SELECT coalesce(array_agg(e.id) FILTER (WHERE e.attempts < e.max_attempts), '{}'),
           coalesce(array_agg(e.id) FILTER (WHERE e.attempts >= e.max_attempts), '{}')
    INTO v_retry, v_dead
    FROM (
        SELECT j.id, j.attempts, j.max_attempts
        FROM jobq._job AS j
        WHERE j.id = ANY (v_leased || ARRAY(SELECT p.id FROM jobq._job AS p
                                            WHERE p.parked_expires_at < now()
                                            ORDER BY p.parked_expires_at
                                            LIMIT reap.n))
          AND j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT reap.n
        FOR UPDATE SKIP LOCKED
    ) AS e;

    INSERT INTO jobq._counter (queue, bucket, failed)
    SELECT j.queue, date_trunc('minute', now()), count(*)
    FROM jobq._job AS j
    WHERE j.id = ANY (v_retry || v_dead)
    GROUP BY j.queue;
    -- Each expired lease is a failed attempt in the job's error history.
    IF cardinality(v_retry) + cardinality(v_dead) > 0 THEN
        PERFORM jobq._record_errors(array_agg(j.id), array_agg(j.attempts),
                                    array_agg(jobq._reap_note(j.lease_expires_at, j.worker, NULL)
                                              || CASE WHEN j.id = ANY (v_dead) THEN E'\nno attempts left' ELSE '' END),
                                    array_agg(j.worker))
        FROM jobq._job AS j
        WHERE j.id = ANY (v_retry || v_dead);
    END IF;

    WITH requeued AS (
        UPDATE jobq._job AS j
        SET status = 'ready',
            parked = false,
            run_at = now(),
            lease_token = NULL,
            lease_expires_at = NULL,
            heartbeat_at = NULL,
            last_error = jobq._reap_note(j.lease_expires_at, j.worker, j.last_error)
        WHERE j.id = ANY (v_retry)
        RETURNING j.queue
    )
    SELECT array_agg(DISTINCT r.queue) INTO v_queues FROM requeued AS r;
    -- Wake the workers of the queues that got jobs back.
    PERFORM pg_notify('jobq', q.queue) FROM unnest(v_queues) AS q(queue);

    IF cardinality(v_dead) > 0 THEN
        UPDATE jobq._job AS j
        SET last_error = jobq._reap_note(j.lease_expires_at, j.worker, j.last_error) || E'\nno attempts left'
        WHERE j.id = ANY (v_dead);
        PERFORM jobq._finish(p_ids => v_dead, p_lease_tokens => NULL, p_status => 'dead', p_error => NULL);
    END IF;
    -- Leases in place held for over 10 seconds (a worker that never
    -- heart-beats) leave the claim index too, so claims do not step over
    -- them. Rows busy elsewhere are skipped, never waited for. The rows are
    -- picked once (a materialized CTE) and joined by id: as "id IN (SELECT
    -- ... FOR UPDATE)" the locking scan could become the inner side of a
    -- nested loop, run again for every live job.
    WITH stale AS MATERIALIZED (
        SELECT l.id FROM jobq._job AS l
        WHERE l.id = ANY (v_leased) AND l.status = 'running' AND NOT l.parked
          AND l.started_at < now() - interval '10 seconds'
        FOR UPDATE SKIP LOCKED
    )
    UPDATE jobq._job AS j SET parked = true
    FROM stale AS s
    WHERE j.id = s.id;
    PERFORM jobq._fold_counters();
    PERFORM jobq._forget_taken();
    RETURN cardinality(v_retry) + cardinality(v_dead);
END
$$;
COMMENT ON FUNCTION jobq.reap(integer) IS
    'Returns up to n jobs with an expired lease to the queue (or to dead letter when out of attempts); returns how many.';

CREATE FUNCTION jobq.next_run_at(queues text[]) RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_next timestamptz;
BEGIN
    -- The earliest future run_at among the jobs of these queues scheduled
    -- for later (retries in backoff, delayed jobs; NULL when none): how long
    -- an idle worker may sleep before it claims again. A loose index scan over the
    -- distinct priorities, one seek each, so it stays cheap at any size.
    IF next_run_at.queues IS NULL OR cardinality(next_run_at.queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'jobq: queues must be an array of 1 to 100 queue names'
            USING ERRCODE = 'JQ001', HINT = 'Pass e.g. ARRAY[''emails''].';
    END IF;
    IF array_ndims(next_run_at.queues) > 1 THEN
        RAISE EXCEPTION 'jobq: queues must be a one-dimensional array, got % dimensions %',
                array_ndims(next_run_at.queues), array_dims(next_run_at.queues)
            USING ERRCODE = 'JQ001', HINT = 'Pass a list of names, e.g. ARRAY[''emails''].';
    END IF;
    PERFORM jobq._check_queue(u.name, format('queues[%s]', array_lower(next_run_at.queues, 1) + u.ord - 1))
    FROM unnest(next_run_at.queues) WITH ORDINALITY AS u(name, ord);
    -- Only a role that may claim a queue learns when its next job falls due
    -- (as claim: JQ020 for a queue with consume grants the caller lacks).
    PERFORM jobq._check_queue_privilege(next_run_at.queues, 'consume')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g, unnest(next_run_at.queues) AS q(name)
                      WHERE g.privilege = 'consume' AND q.name LIKE g.queue_like);
    WITH RECURSIVE prio AS (
        (SELECT j.queue, j.priority FROM jobq._job AS j
         WHERE j.queue = ANY (next_run_at.queues) AND NOT j.parked AND j.status = 'ready'
         ORDER BY j.queue, j.priority LIMIT 1)
        UNION ALL
        SELECT nxt.queue, nxt.priority
        FROM prio AS p,
             LATERAL (SELECT j.queue, j.priority FROM jobq._job AS j
                      WHERE NOT j.parked AND j.status = 'ready' AND j.queue = ANY (next_run_at.queues)
                        AND (j.queue, j.priority) > (p.queue, p.priority)
                      ORDER BY j.queue, j.priority LIMIT 1) AS nxt
    )
    SELECT min(f.run_at) INTO v_next
    FROM prio AS p,
         LATERAL (SELECT j.run_at FROM jobq._job AS j
                  WHERE j.queue = p.queue AND NOT j.parked AND j.status = 'ready' AND j.priority = p.priority
                    AND j.run_at > now()
                  ORDER BY j.run_at LIMIT 1) AS f;
    RETURN v_next;
END
$$;
COMMENT ON FUNCTION jobq.next_run_at(text[]) IS
    'The next scheduled time in these queues: the earliest future run_at (a retry in backoff, a delayed job; NULL if none), when an idle worker should claim again.';

---------------------------------------------------------------------------
-- 7. operator API
---------------------------------------------------------------------------

CREATE FUNCTION jobq.retry(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job jobq._job_archive;
    v_queue text;
    v_waits boolean;
BEGIN
    -- Run a job again now: a dead or cancelled job comes back with a fresh
    -- attempt budget, and the descendants its failure cancelled wait for it
    -- again; a scheduled or backing-off job runs now. A job with parents
    -- goes through its gate again: ready when they have completed, waiting
    -- for those live again, or cancelled again at once (returning false)
    -- when one is dead or cancelled and its on_parent_failure is 'cancel':
    -- retry that one. False for waiting, running, completed and unknown jobs.
    IF retry.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;

    UPDATE jobq._job AS j SET run_at = now()
    WHERE j.id = retry.id AND j.status = 'ready'
    RETURNING j.queue INTO v_queue;
    IF FOUND THEN
        PERFORM pg_notify('jobq', v_queue);
        RETURN true;
    END IF;

    SELECT * INTO v_job FROM jobq._job_archive AS a
    WHERE a.id = retry.id AND a.status IN ('dead', 'cancelled')
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_waits := EXISTS (SELECT FROM jobq._job_wait AS w WHERE w.job_id = v_job.id);
    BEGIN
        INSERT INTO jobq._job (id, queue, payload, priority, run_at, attempts, max_attempts,
                               job_key, last_error, created_at, group_key, timeout, has_children, has_parents,
                               status, parked, meta, fair_key)
        VALUES (v_job.id, v_job.queue, v_job.payload, v_job.priority, now(), 0, v_job.max_attempts,
                v_job.job_key, v_job.last_error, v_job.created_at, v_job.group_key, v_job.timeout,
                EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.parent_id = v_job.id),
                EXISTS (SELECT FROM jobq._job_dep AS d WHERE d.child_id = v_job.id),
                CASE WHEN v_waits THEN 'waiting' ELSE 'ready' END, v_waits, v_job.meta,
                coalesce(v_job.fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = v_job.queue AND q.fair)));
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'jobq: job % cannot be retried: job_key % is held by an active job',
                v_job.id, pg_catalog.quote_literal(v_job.job_key)
            USING ERRCODE = 'JQ013',
                  HINT = 'Wait for the active job to finish, or cancel it with jobq.cancel(), then retry.';
    END;
    DELETE FROM jobq._job_archive AS a WHERE a.id = v_job.id;
    IF v_waits THEN
        -- Through its gate again: released, waiting, or cancelled at once.
        PERFORM jobq._gate_recount(ARRAY[v_job.id]);
        PERFORM jobq._settle(ARRAY[v_job.id]);
        IF NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = v_job.id) THEN
            RAISE NOTICE 'jobq: job % is cancelled again: % did not complete; retry that job instead',
                v_job.id, (SELECT 'ancestor job ' || a.cancelled_by FROM jobq._job_archive AS a WHERE a.id = v_job.id);
            RETURN false;
        END IF;
    ELSE
        PERFORM pg_notify('jobq', v_job.queue);
    END IF;
    PERFORM jobq._restore_descendants(v_job.id);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.retry(bigint) IS
    'Runs a dead, cancelled or scheduled job again now (fresh attempts for dead/cancelled, whose cancelled descendants wait again; one cancelled while waiting waits again); false for waiting, running, completed or unknown ids.';

CREATE FUNCTION jobq.retry_dead(queue text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- The argument is named queue, like the column in ON CONFLICT (queue, job_key)
-- below: resolve unqualified names to columns (the argument is always
-- written retry_dead.queue).
#variable_conflict use_column
DECLARE
    v_moved bigint[];
    v_gated bigint[];
    v_count integer;
    v_parent bigint;
BEGIN
    -- Bring every dead job of a queue back with a fresh attempt budget (one
    -- with parents through its gate again, as jobq.retry does), and the
    -- descendants their deaths cancelled back to waiting. Jobs whose
    -- job_key is held by an active job stay dead (see NOTICE).
    PERFORM jobq._check_queue(retry_dead.queue, 'queue');
    WITH dead AS (
        SELECT a.* FROM jobq._job_archive AS a
        WHERE a.queue = retry_dead.queue AND a.status = 'dead'
        ORDER BY a.id
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        INSERT INTO jobq._job (id, queue, payload, priority, run_at, attempts, max_attempts,
                               job_key, last_error, created_at, group_key, timeout, has_children, has_parents,
                               status, parked, meta, fair_key)
        SELECT d.id, d.queue, d.payload, d.priority, now(), 0, d.max_attempts,
               d.job_key, d.last_error, d.created_at, d.group_key, d.timeout,
               EXISTS (SELECT FROM jobq._job_dep AS e WHERE e.parent_id = d.id),
               EXISTS (SELECT FROM jobq._job_dep AS e WHERE e.child_id = d.id),
               CASE WHEN w.job_id IS NULL THEN 'ready' ELSE 'waiting' END, w.job_id IS NOT NULL, d.meta,
               coalesce(d.fair_key, (SELECT '' FROM jobq._queue AS q WHERE q.queue = d.queue AND q.fair))
        FROM dead AS d
        LEFT JOIN jobq._job_wait AS w ON w.job_id = d.id
        ORDER BY d.id
        ON CONFLICT (queue, job_key) WHERE job_key IS NOT NULL DO NOTHING
        RETURNING id, has_children, status
    ), removed AS (
        DELETE FROM jobq._job_archive AS a USING moved AS m WHERE a.id = m.id
        RETURNING a.id, m.has_children, m.status
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id) FILTER (WHERE r.has_children), '{}'),
           coalesce(array_agg(r.id ORDER BY r.id) FILTER (WHERE r.status = 'waiting'), '{}'),
           count(*)
    INTO v_moved, v_gated, v_count
    FROM removed AS r;
    IF v_count > 0 THEN
        PERFORM pg_notify('jobq', retry_dead.queue);
    END IF;
    IF cardinality(v_gated) > 0 THEN
        -- Jobs with parents go through their gates again (all of them
        -- dead, so their parents finished: mostly released at once).
        PERFORM jobq._gate_recount(v_gated);
        PERFORM jobq._finish_dependents(jobq._settle(v_gated), 'cancelled');
    END IF;
    FOREACH v_parent IN ARRAY v_moved LOOP
        CONTINUE WHEN NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = v_parent);
        PERFORM jobq._restore_descendants(v_parent);
    END LOOP;
    IF EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.queue = retry_dead.queue AND a.status = 'dead') THEN
        RAISE NOTICE 'jobq: some dead jobs of queue % stay dead: their job_key is held by an active job',
            pg_catalog.quote_literal(retry_dead.queue);
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION jobq.retry_dead(text) IS
    'Brings every dead job of a queue back with a fresh attempt budget (and the descendants their deaths cancelled); returns how many.';

CREATE FUNCTION jobq.run_now(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Run a scheduled job (ready, run_at in the future) now: its run_at
    -- becomes now() and its queue's workers are woken, as enqueue does.
    -- False for unknown ids and jobs in any other state (ready now, running,
    -- finished): jobq.retry() is for dead and cancelled ones.
    IF run_now.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass the id of a scheduled job.';
    END IF;
    UPDATE jobq._job AS j SET run_at = now()
    WHERE j.id = run_now.id AND j.status = 'ready' AND j.run_at > now()
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', v_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.run_now(bigint) IS
    'Runs a scheduled job now (run_at = now(), workers woken); false for unknown ids and jobs not scheduled.';

CREATE FUNCTION jobq._notify_cancelled(p_ids bigint[], p_lease_tokens uuid[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Tell the workers holding these running jobs that they were cancelled:
    -- NOTIFY jobq_cancel, the payload 'id:lease_token' pairs separated by
    -- spaces, up to 100 per notification (a payload holds 8000 bytes). The
    -- token names the lease, so that only its holder acts on it; it is
    -- worthless once this commits (the lease is over). Sent at commit, like
    -- every NOTIFY; a worker that misses it learns at its next heartbeat.
    PERFORM pg_notify('jobq_cancel', c.pairs)
    FROM (SELECT string_agg(u.id::text || ':' || u.token::text, ' ' ORDER BY u.ord) AS pairs
          FROM unnest(p_ids, p_lease_tokens) WITH ORDINALITY AS u(id, token, ord)
          WHERE u.token IS NOT NULL
          GROUP BY (u.ord - 1) / 100) AS c;
END
$$;
COMMENT ON FUNCTION jobq._notify_cancelled(bigint[], uuid[]) IS
    'Sends NOTIFY jobq_cancel with the id:lease_token pairs of cancelled running jobs (100 per notification).';

CREATE FUNCTION jobq.cancel(id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_token uuid;
    v_done boolean;
BEGIN
    -- Cancel a waiting, ready, scheduled or running job. A running job's
    -- holder is told at once (NOTIFY jobq_cancel at commit, see
    -- jobq._notify_cancelled) and otherwise finds its lease lost at its
    -- next heartbeat; nothing waits for it. Its waiting dependents are
    -- cancelled too (on_parent_failure 'cancel', cancelled_by this job) or
    -- count it as finished ('run'). False for finished and unknown jobs.
    IF cancel.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    SELECT j.lease_token INTO v_token FROM jobq._job AS j WHERE j.id = cancel.id FOR UPDATE;
    v_done := EXISTS (SELECT FROM jobq._finish(p_ids => ARRAY[cancel.id], p_lease_tokens => NULL,
                                               p_status => 'cancelled', p_error => 'cancelled by ' || session_user));
    IF v_done AND v_token IS NOT NULL THEN
        PERFORM jobq._notify_cancelled(ARRAY[cancel.id], ARRAY[v_token]);
    END IF;
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.cancel(bigint) IS
    'Cancels a live job (a running job''s holder is notified at commit and loses the lease); false for finished or unknown ids.';

CREATE FUNCTION jobq.cancel_jobs(
    queue text, status text DEFAULT NULL, payload_contains jsonb DEFAULT NULL, meta_contains jsonb DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ids bigint[];
    v_tokens uuid[];
    v_gone bigint[];
BEGIN
    -- Cancel the live jobs of a queue, as jobq.cancel() does one by one:
    -- every one (status NULL), or those ready now, scheduled for later,
    -- running or waiting for parents; only those whose payload contains
    -- payload_contains (@>) when given, and whose meta contains
    -- meta_contains when that is given. Running jobs' holders are notified
    -- (jobq._notify_cancelled) and lose their lease; dependents follow as
    -- after jobq.cancel(). Returns how many.
    PERFORM jobq._check_queue(cancel_jobs.queue, 'queue');
    IF cancel_jobs.status IS NOT NULL AND cancel_jobs.status NOT IN ('ready', 'scheduled', 'running', 'waiting') THEN
        RAISE EXCEPTION 'jobq: status must be NULL (every live job), ''ready'', ''scheduled'', ''running'' or ''waiting'', got %',
                pg_catalog.quote_literal(pg_catalog.left(cancel_jobs.status, 100))
            USING ERRCODE = 'JQ017', HINT = 'Dead jobs are finished already: remove them with jobq.discard_dead().';
    END IF;
    IF jsonb_typeof(cancel_jobs.payload_contains) <> 'object' THEN
        RAISE EXCEPTION 'jobq: payload_contains must be a JSON object, got %', jsonb_typeof(cancel_jobs.payload_contains)
            USING ERRCODE = 'JQ017', HINT = 'Pass e.g. ''{"customer": 42}''::jsonb: jobs whose payload contains it.';
    END IF;
    IF jsonb_typeof(cancel_jobs.meta_contains) <> 'object' THEN
        RAISE EXCEPTION 'jobq: meta_contains must be a JSON object, got %', jsonb_typeof(cancel_jobs.meta_contains)
            USING ERRCODE = 'JQ017', HINT = 'Pass e.g. ''{"tenant": "acme"}''::jsonb: jobs whose meta contains it.';
    END IF;
    -- Locked in id order (as jobq._finish goes), with the running ones' lease tokens.
    SELECT array_agg(c.id ORDER BY c.id), array_agg(c.lease_token ORDER BY c.id) INTO v_ids, v_tokens
    FROM (SELECT j.id, j.lease_token FROM jobq._job AS j
          WHERE j.queue = cancel_jobs.queue
            AND CASE cancel_jobs.status
                    WHEN 'ready' THEN j.status = 'ready' AND j.run_at <= now()
                    WHEN 'scheduled' THEN j.status = 'ready' AND j.run_at > now()
                    WHEN 'running' THEN j.status = 'running'
                    WHEN 'waiting' THEN j.status = 'waiting'
                    ELSE true END
            AND (cancel_jobs.payload_contains IS NULL OR j.payload @> cancel_jobs.payload_contains)
            AND (cancel_jobs.meta_contains IS NULL OR j.meta @> cancel_jobs.meta_contains)
          ORDER BY j.id
          FOR UPDATE OF j) AS c;
    v_gone := ARRAY(SELECT f.id FROM jobq._finish(p_ids => coalesce(v_ids, '{}'), p_lease_tokens => NULL, p_status => 'cancelled',
                                                  p_error => 'cancelled by ' || session_user) AS f(id));
    IF cardinality(array_remove(v_tokens, NULL)) > 0 THEN
        PERFORM jobq._notify_cancelled(ARRAY(SELECT u.id FROM unnest(v_ids, v_tokens) AS u(id, token)
                                             WHERE u.token IS NOT NULL AND u.id = ANY (v_gone) ORDER BY u.id),
                                       ARRAY(SELECT u.token FROM unnest(v_ids, v_tokens) AS u(id, token)
                                             WHERE u.token IS NOT NULL AND u.id = ANY (v_gone) ORDER BY u.id));
    END IF;
    RETURN cardinality(v_gone);
END
$$;
COMMENT ON FUNCTION jobq.cancel_jobs(text, text, jsonb, jsonb) IS
    'Cancels the live jobs of a queue (optionally only ready, scheduled, running or waiting ones, or those whose payload or meta contains a filter); returns how many (running ones'' holders are notified).';

CREATE FUNCTION jobq.discard_dead(queue text, older_than interval DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_discarded integer;
    v_descendants integer;
BEGIN
    -- Delete the dead jobs of a queue for good (all of them, or those dead
    -- for longer than older_than), with their error history, and the
    -- descendants their deaths cancelled (in any queue; see NOTICE). Returns
    -- how many dead jobs. They cannot be retried afterwards; jobq.stats'
    -- dead_total still counts them.
    PERFORM jobq._check_queue(discard_dead.queue, 'queue');
    IF discard_dead.older_than < interval '0' THEN
        RAISE EXCEPTION 'jobq: older_than must not be negative, got %', discard_dead.older_than
            USING ERRCODE = 'JQ008', HINT = 'Pass e.g. interval ''7 days'', or NULL for every dead job.';
    END IF;
    WITH dead AS (
        SELECT a.id FROM jobq._job_archive AS a
        WHERE a.queue = discard_dead.queue AND a.status = 'dead'
          AND (discard_dead.older_than IS NULL OR a.finished_at < now() - discard_dead.older_than)
    ), gone AS (
        -- With the descendants their deaths cancelled: only a retry of
        -- their root could bring those back.
        DELETE FROM jobq._job_archive AS a
        WHERE a.id IN (SELECT d.id FROM dead AS d)
           OR (a.status = 'cancelled' AND a.cancelled_by IN (SELECT d.id FROM dead AS d))
        RETURNING a.id, a.status
    ), forgotten AS (
        DELETE FROM jobq._job_error AS e USING gone AS g WHERE e.job_id = g.id
    ), unlinked AS (
        DELETE FROM jobq._job_dep AS d USING gone AS g WHERE d.child_id = g.id
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w USING gone AS g WHERE w.job_id = g.id
    )
    SELECT count(*) FILTER (WHERE g.status = 'dead'), count(*) FILTER (WHERE g.status = 'cancelled')
    INTO v_discarded, v_descendants
    FROM gone AS g;
    IF v_descendants > 0 THEN
        RAISE NOTICE 'jobq: % cancelled descendants of the discarded jobs were discarded with them', v_descendants;
    END IF;
    RETURN v_discarded;
END
$$;
COMMENT ON FUNCTION jobq.discard_dead(text, interval) IS
    'Deletes the dead jobs of a queue (those dead longer than older_than when given); returns how many.';

CREATE FUNCTION jobq.prune(n integer DEFAULT 100000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pruned integer;
BEGIN
    -- Remove the finished jobs whose retention has passed (with their error
    -- history, the edges to their parents and the gate of one cancelled
    -- while waiting), except a completed job with a live child (its result
    -- stays readable until the child finishes) and a dead or cancelled job
    -- with any child jobq still knows (it must not pass for completed: a
    -- parent jobq forgot counts as completed). The archive's day partitions
    -- go whole once their day has passed (jobq._archive_maintain, which also
    -- creates the days ahead); up to n expired rows of its default partition
    -- are deleted one by one. Then the rate-limit bookkeeping older than any
    -- rate window (1 day) and key completions older than any unique_for (366
    -- days) go, and the counters are folded. Returns how many jobs went.
    PERFORM jobq._check_batch(prune.n, 'n', 10000000);
    WITH old AS (
        SELECT a.id FROM jobq._job_archive_kept AS a
        WHERE a.prune_after < now()
          AND NOT EXISTS (SELECT FROM jobq._job_dep AS d
                          WHERE d.parent_id = a.id
                            AND (a.status <> 'completed' OR EXISTS (SELECT FROM jobq._job AS c WHERE c.id = d.child_id)))
        ORDER BY a.prune_after
        LIMIT prune.n
        FOR UPDATE OF a SKIP LOCKED
    ), gone AS (
        DELETE FROM jobq._job_archive_kept AS a USING old AS o WHERE a.id = o.id
        RETURNING a.id, a.last_error IS NOT NULL AS erred
    ), forgotten AS (
        DELETE FROM jobq._job_error AS e USING gone AS g WHERE e.job_id = g.id AND g.erred
    ), unlinked AS (
        DELETE FROM jobq._job_dep AS d USING gone AS g WHERE d.child_id = g.id
    ), ungated AS (
        DELETE FROM jobq._job_wait AS w USING gone AS g WHERE w.job_id = g.id
    )
    SELECT count(*) INTO v_pruned FROM gone;
    DELETE FROM jobq._rate_start AS r WHERE r.started_at < now() - interval '1 day';
    DELETE FROM jobq._key_done AS k WHERE k.finished_at < now() - interval '366 days';
    PERFORM jobq._fold_counters();
    PERFORM jobq._forget_taken();
    -- Last: dropping a partition holds a lock of the archive until commit.
    RETURN v_pruned + least(jobq._archive_maintain(), 2147483647 - v_pruned);
END
$$;
COMMENT ON FUNCTION jobq.prune(integer) IS
    'Drops the archive''s expired day partitions (creating the days ahead) and deletes up to n expired rows of its default partition; returns how many jobs.';

---------------------------------------------------------------------------
-- 7b. results and states of single jobs
---------------------------------------------------------------------------

CREATE FUNCTION jobq.status(id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_status text;
BEGIN
    -- The state of one job: waiting, ready, scheduled, running, completed,
    -- dead or cancelled. (VOLATILE, as result and parent_results: called in
    -- the statement that enqueued or completed the job, it sees that.) JQ019 for an id jobq does not know (never issued,
    -- or finished and gone: completed without history, or pruned), and
    -- alike for a job of a queue the caller may not read (per-queue grants).
    IF status.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    SELECT CASE WHEN j.status = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.status END INTO v_status
    FROM jobq._job AS j WHERE j.id = status.id;
    IF v_status IS NULL THEN
        SELECT a.status INTO v_status FROM jobq._job_archive AS a WHERE a.id = status.id;
    END IF;
    IF v_status IS NULL OR NOT jobq._job_allowed(status.id, 'read') THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', status.id
            USING ERRCODE = 'JQ019',
                  HINT = 'Completed jobs are kept for the queue''s retention (result_retention when they have a result).';
    END IF;
    RETURN v_status;
END
$$;
COMMENT ON FUNCTION jobq.status(bigint) IS
    'The state of one job (waiting, ready, scheduled, running, completed, dead, cancelled); JQ019 when unknown.';

CREATE FUNCTION jobq.result(id bigint) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job record;
BEGIN
    -- The result a completed job reported (jobq.complete's result). NULL
    -- while the job is unfinished, when it completed without one, and when
    -- it is dead or cancelled (jobq.status tells these apart). JQ019 for an
    -- id jobq does not know, or of a queue the caller may not read.
    IF result.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    IF EXISTS (SELECT FROM jobq._job AS j WHERE j.id = result.id) AND jobq._job_allowed(result.id, 'read') THEN
        RETURN NULL;
    END IF;
    SELECT a.status, a.result INTO v_job FROM jobq._job_archive AS a
    WHERE a.id = result.id AND jobq._job_allowed(result.id, 'read');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', result.id
            USING ERRCODE = 'JQ019',
                  HINT = 'A result is kept for the queue''s result_retention (or retention, when longer).';
    END IF;
    RETURN CASE WHEN v_job.status = 'completed' THEN v_job.result END;
END
$$;
COMMENT ON FUNCTION jobq.result(bigint) IS
    'The result of a completed job; NULL while unfinished, without one, or dead/cancelled; JQ019 when unknown.';

CREATE FUNCTION jobq.parent_results(id bigint) RETURNS TABLE (parent_id bigint, result jsonb)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_open boolean := NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read');
BEGIN
    -- One row per parent of a job (its depends_on, or a callback's members),
    -- by parent id, with the result that parent completed with: NULL when
    -- it has none, has not completed, or jobq no longer keeps it (a parent's
    -- result is kept while a child of it is live), or is of a queue the
    -- caller may not read. No rows for a job without parents; JQ019 for an
    -- id jobq does not know, or of a queue the caller may not read.
    IF parent_results.id IS NULL THEN
        RAISE EXCEPTION 'jobq: id must not be NULL' USING ERRCODE = 'JQ010', HINT = 'Pass a job id.';
    END IF;
    IF NOT jobq._job_allowed(parent_results.id, 'read')
       OR (NOT EXISTS (SELECT FROM jobq._job AS j WHERE j.id = parent_results.id)
           AND NOT EXISTS (SELECT FROM jobq._job_archive AS a WHERE a.id = parent_results.id)) THEN
        RAISE EXCEPTION 'jobq: job % is unknown: never enqueued, or finished and no longer kept', parent_results.id
            USING ERRCODE = 'JQ019', HINT = 'Read the results of a job''s parents while it is live, e.g. in its handler.';
    END IF;
    RETURN QUERY
    SELECT d.parent_id, a.result
    FROM jobq._job_dep AS d
    LEFT JOIN jobq._job_archive AS a ON a.id = d.parent_id AND a.status = 'completed'
                                        AND (v_open OR jobq._denied_queue(ARRAY[a.queue], 'read') IS NULL)
    WHERE d.child_id = parent_results.id
    ORDER BY d.parent_id;
END
$$;
COMMENT ON FUNCTION jobq.parent_results(bigint) IS
    'The parents of a job with the results they completed with (NULL when none); JQ019 when the job is unknown.';

CREATE FUNCTION jobq.watch(id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_status text;
BEGIN
    -- Ask to be told when a job finishes: finishing it (completed, dead or
    -- cancelled) sends NOTIFY jobq_finished with its id. Returns its state
    -- now, as jobq.status() (JQ019 for an unknown id, and for a job of a
    -- queue the caller may not read, which is not watched). LISTEN
    -- jobq_finished before calling this: a job that finishes in between is then either
    -- notified or already finished here. Jobs nobody watches send nothing
    -- when they finish. The job is marked watched when this transaction
    -- commits (jobq._settle_at_commit), not here: a watcher's open
    -- transaction never holds up the job's worker. A job that finishes
    -- between this call and that commit is notified by the commit itself.
    v_status := jobq.status(watch.id);
    IF v_status NOT IN ('completed', 'dead', 'cancelled') THEN
        INSERT INTO jobq._at_commit (watched) VALUES (ARRAY[watch.id]);
        PERFORM set_config('jobq.named_jobs', 'on', true);   -- for jobq._finish in this transaction
    END IF;
    RETURN v_status;
END
$$;
COMMENT ON FUNCTION jobq.watch(bigint) IS
    'Marks a live job so that finishing it sends NOTIFY jobq_finished with its id; returns its state (as jobq.status).';

CREATE FUNCTION jobq.configure_queue(
    queue text,
    max_attempts integer DEFAULT NULL,
    backoff_base interval DEFAULT NULL,
    backoff_cap interval DEFAULT NULL,
    backoff_jitter double precision DEFAULT NULL,
    lease interval DEFAULT NULL,
    retention interval DEFAULT NULL,
    dead_retention interval DEFAULT NULL,
    max_payload_bytes integer DEFAULT NULL,
    concurrency integer DEFAULT NULL,
    rate_limit integer DEFAULT NULL,
    rate_interval interval DEFAULT NULL,
    timeout interval DEFAULT NULL,
    result_retention interval DEFAULT NULL,
    fair boolean DEFAULT NULL,
    fair_weights jsonb DEFAULT NULL,
    per_key_concurrency integer DEFAULT NULL
) RETURNS jobq._queue
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_constraint text;
    v_setting record;
BEGIN
    -- Set the given settings of a queue (NULL arguments leave a setting as
    -- it is; concurrency => 0, rate_limit => 0 or timeout => interval '0'
    -- removes that limit); returns the effective settings. New jobs and new
    -- failures use them; max_attempts and timeout are fixed on a job when it
    -- is enqueued. A new concurrency limit counts the jobs running now; a
    -- claim already under way when it commits may still lease past it once.
    -- The short durations (backoff, lease, rate interval, timeout) must be
    -- fixed lengths: no months, days and time of one sign. result_retention:
    -- how long a completed job with a result stays readable (jobq.result),
    -- at the least; retention when that is longer. fair => true: claims
    -- serve the queue's fair keys round-robin (fair_weights: more turns for
    -- some keys, '{}' removes them; per_key_concurrency: at most that many
    -- running jobs per key, 0 removes it); fair => false drops those too.
    -- A fair queue has no serial groups (JQ012 while it has grouped jobs).
    PERFORM jobq._check_queue(configure_queue.queue, 'queue');
    PERFORM jobq._check_fair_weights(configure_queue.fair_weights);
    IF (configure_queue.fair_weights IS NOT NULL OR configure_queue.per_key_concurrency > 0)
       AND NOT coalesce(configure_queue.fair, (jobq._settings(configure_queue.queue)).fair) THEN
        RAISE EXCEPTION 'jobq: setting % applies to fair queues only, and queue % is not one',
                CASE WHEN configure_queue.fair_weights IS NOT NULL THEN 'fair_weights' ELSE 'per_key_concurrency' END,
                pg_catalog.quote_literal(configure_queue.queue)
            USING ERRCODE = 'JQ012', HINT = 'Pass fair => true with it (or first).';
    END IF;
    IF configure_queue.fair AND NOT coalesce((jobq._settings(configure_queue.queue)).fair, false) THEN
        -- Turning fair on: no job may be written meanwhile. A fair queue's
        -- claims read jobq._job_fair_idx, which holds jobs with a fair key,
        -- and below the queue's keyless jobs get ''. An enqueue that read
        -- the queue as not fair and commits after that UPDATE ran would
        -- leave a keyless job no fair claim ever finds. So wait for every
        -- transaction that wrote (or row-locked) jobs, and hold back the
        -- next ones until this one commits: they then read the queue as
        -- fair (each enqueue decides a job's key in its INSERT, whose
        -- snapshot is taken after the table lock). Plain reads (views) go on.
        LOCK TABLE jobq._job IN EXCLUSIVE MODE;
    END IF;
    IF configure_queue.fair AND EXISTS (SELECT FROM jobq._job AS g
                                         WHERE g.queue = configure_queue.queue AND g.group_key IS NOT NULL) THEN
        RAISE EXCEPTION 'jobq: setting fair cannot be turned on while queue % has jobs of serial groups',
                pg_catalog.quote_literal(configure_queue.queue)
            USING ERRCODE = 'JQ012',
                  HINT = 'A fair queue has no serial groups: let the grouped jobs finish (or cancel them) first, '
                         'or use another queue.';
    END IF;
    FOR v_setting IN
        SELECT d.name, d.value
        FROM (VALUES ('backoff_base', configure_queue.backoff_base), ('backoff_cap', configure_queue.backoff_cap),
                     ('lease', configure_queue.lease), ('rate_interval', configure_queue.rate_interval),
                     ('timeout', configure_queue.timeout)) AS d(name, value)
        WHERE NOT jobq._fixed_length(d.value)
    LOOP
        RAISE EXCEPTION 'jobq: setting % must be a duration without months or years, its days and time of one sign, got %',
                v_setting.name, v_setting.value
            USING ERRCODE = 'JQ012', HINT = 'Write it in seconds, minutes, hours or days, e.g. interval ''30 seconds''.';
    END LOOP;
    INSERT INTO jobq._queue AS q (queue, max_attempts, backoff_base, backoff_cap, backoff_jitter,
                                  lease, retention, dead_retention, max_payload_bytes,
                                  concurrency, rate_limit, rate_interval, timeout, result_retention,
                                  fair, fair_weights, per_key_concurrency)
    VALUES (configure_queue.queue, configure_queue.max_attempts, configure_queue.backoff_base,
            configure_queue.backoff_cap, configure_queue.backoff_jitter, configure_queue.lease,
            configure_queue.retention, configure_queue.dead_retention, configure_queue.max_payload_bytes,
            nullif(configure_queue.concurrency, 0), nullif(configure_queue.rate_limit, 0),
            configure_queue.rate_interval, nullif(configure_queue.timeout, interval '0'),
            configure_queue.result_retention, nullif(configure_queue.fair, false),
            CASE WHEN configure_queue.fair_weights <> '{}' THEN configure_queue.fair_weights END,
            nullif(configure_queue.per_key_concurrency, 0))
    ON CONFLICT ON CONSTRAINT _queue_pkey DO UPDATE
    SET max_attempts = coalesce(excluded.max_attempts, q.max_attempts),
        backoff_base = coalesce(excluded.backoff_base, q.backoff_base),
        backoff_cap = coalesce(excluded.backoff_cap, q.backoff_cap),
        backoff_jitter = coalesce(excluded.backoff_jitter, q.backoff_jitter),
        lease = coalesce(excluded.lease, q.lease),
        retention = coalesce(excluded.retention, q.retention),
        dead_retention = coalesce(excluded.dead_retention, q.dead_retention),
        max_payload_bytes = coalesce(excluded.max_payload_bytes, q.max_payload_bytes),
        concurrency = CASE WHEN configure_queue.concurrency = 0 THEN NULL
                           ELSE coalesce(excluded.concurrency, q.concurrency) END,
        rate_limit = CASE WHEN configure_queue.rate_limit = 0 THEN NULL
                          ELSE coalesce(excluded.rate_limit, q.rate_limit) END,
        rate_interval = coalesce(excluded.rate_interval, q.rate_interval),
        timeout = CASE WHEN configure_queue.timeout = interval '0' THEN NULL
                       ELSE coalesce(excluded.timeout, q.timeout) END,
        result_retention = coalesce(excluded.result_retention, q.result_retention),
        fair = CASE WHEN configure_queue.fair IS NULL THEN q.fair ELSE excluded.fair END,
        fair_weights = CASE WHEN NOT configure_queue.fair OR configure_queue.fair_weights = '{}' THEN NULL
                            ELSE coalesce(excluded.fair_weights, q.fair_weights) END,
        per_key_concurrency = CASE WHEN NOT configure_queue.fair OR configure_queue.per_key_concurrency = 0 THEN NULL
                                   ELSE coalesce(excluded.per_key_concurrency, q.per_key_concurrency) END,
        fair_cursor = CASE WHEN NOT configure_queue.fair THEN NULL ELSE q.fair_cursor END,
        fair_turns = CASE WHEN NOT configure_queue.fair THEN NULL ELSE q.fair_turns END,
        updated_at = now();
    IF configure_queue.fair THEN
        -- A fair queue claims from jobq._job_fair_idx, which holds jobs with
        -- a fair key: the live ones without get '' (the keyless jobs' turn).
        UPDATE jobq._job AS j SET fair_key = ''
        WHERE j.queue = configure_queue.queue AND j.fair_key IS NULL;
    END IF;
    IF configure_queue.fair IS NOT NULL OR configure_queue.per_key_concurrency > 0
       OR configure_queue.concurrency > 0 THEN
        -- A limited queue counts its running jobs (per key with
        -- per_key_concurrency) by the parked index: park the leases granted
        -- before the limit. So does a queue that turns fair, or plain: the
        -- leases granted in place before are found where the claims of its
        -- old kind left them (the head of the claim index, or of a fair key).
        UPDATE jobq._job AS j SET parked = true
        WHERE j.queue = configure_queue.queue AND NOT j.parked AND j.status = 'running';
    END IF;
    RETURN jobq._settings(configure_queue.queue);
EXCEPTION WHEN check_violation THEN
    GET STACKED DIAGNOSTICS v_constraint := CONSTRAINT_NAME;
    RAISE EXCEPTION 'jobq: setting % is out of range', regexp_replace(v_constraint, '^queue_|_range$', '', 'g')
        USING ERRCODE = 'JQ012',
              HINT = 'Ranges: max_attempts 1..1000, backoff_base 0..1 day, backoff_cap 0..30 days, '
                     'backoff_jitter 0..1, lease 1 s..1 day, retention 0..3650 days, '
                     'dead_retention 1 s..3650 days, max_payload_bytes 1..104857600, '
                     'concurrency 1..10000 (0: no limit), rate_limit 1..1000000 (0: no limit), '
                     'rate_interval 1 s..1 day, timeout 1 s..1 day (0: none), result_retention 0..3650 days, '
                     'per_key_concurrency 1..10000 (0: no limit).';
END
$$;
COMMENT ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, interval, integer, integer, integer, interval, interval, interval, boolean, jsonb, integer)
    IS 'Sets per-queue settings (NULL leaves a setting unchanged, 0 removes a concurrency or rate limit or a timeout; fair => true serves fair keys round-robin); returns the effective settings.';

CREATE FUNCTION jobq.reset_queue(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Drop every setting override of a queue: it goes back to the defaults.
    -- A paused queue stays paused (use jobq.resume()).
    PERFORM jobq._check_queue(reset_queue.queue, 'queue');
    DELETE FROM jobq._queue AS q WHERE q.queue = reset_queue.queue AND NOT coalesce(q.paused, false);
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE jobq._queue AS q
    SET max_attempts = NULL, backoff_base = NULL, backoff_cap = NULL, backoff_jitter = NULL, lease = NULL,
        retention = NULL, dead_retention = NULL, max_payload_bytes = NULL, concurrency = NULL,
        rate_limit = NULL, rate_interval = NULL, timeout = NULL, result_retention = NULL, fair = NULL,
        fair_weights = NULL, per_key_concurrency = NULL, fair_cursor = NULL, fair_turns = NULL,
        updated_at = now()
    WHERE q.queue = reset_queue.queue;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq.reset_queue(text) IS 'Removes a queue''s setting overrides; false when it had none.';

CREATE FUNCTION jobq.pause(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_was boolean;
BEGIN
    -- Stop claims from a queue (running jobs finish; enqueueing goes on).
    -- True when the queue was not paused before.
    PERFORM jobq._check_queue(pause.queue, 'queue');
    SELECT coalesce(q.paused, false) INTO v_was FROM jobq._queue AS q WHERE q.queue = pause.queue FOR UPDATE;
    INSERT INTO jobq._queue AS q (queue, paused) VALUES (pause.queue, true)
    ON CONFLICT ON CONSTRAINT _queue_pkey DO UPDATE SET paused = true, updated_at = now();
    RETURN NOT coalesce(v_was, false);
END
$$;
COMMENT ON FUNCTION jobq.pause(text) IS 'Stops claims from a queue until jobq.resume(); true when it was not paused.';

CREATE FUNCTION jobq.resume(queue text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Let workers claim from a paused queue again, and wake them.
    -- True when the queue was paused.
    PERFORM jobq._check_queue(resume.queue, 'queue');
    UPDATE jobq._queue AS q SET paused = false, updated_at = now()
    WHERE q.queue = resume.queue AND q.paused;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('jobq', resume.queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.resume(text) IS 'Lets workers claim from a paused queue again; true when it was paused.';

---------------------------------------------------------------------------
-- 7c. per-queue privileges (opt-in): grant_queue, revoke_queue, queue_grants
---------------------------------------------------------------------------

CREATE FUNCTION jobq._check_grant_args(p_role name, p_queue_pattern text, p_privilege text, p_revoking boolean)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise the JQ error of the first bad argument of grant_queue or
    -- revoke_queue: role NULL, empty or not a role (JQ021; revoke_queue also
    -- takes the name of a role dropped since, while grants of it remain),
    -- queue_pattern neither a queue name nor a prefix followed by * (JQ001),
    -- privilege not 'produce', 'consume' or 'read' (JQ017).
    IF p_role IS NULL OR p_role = '' THEN
        RAISE EXCEPTION 'jobq: role must be the name of a role, got %', coalesce(pg_catalog.quote_literal(p_role), 'NULL')
            USING ERRCODE = 'JQ021', HINT = 'Pass a role name, e.g. ''billing_app'' (CREATE ROLE it first).';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles AS r WHERE r.rolname = p_role)
       AND NOT (p_revoking AND EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.role = p_role)) THEN
        RAISE EXCEPTION 'jobq: role must be an existing role, got %', pg_catalog.quote_literal(p_role)
            USING ERRCODE = 'JQ021',
                  HINT = 'Names are case-sensitive here: spell it as pg_roles.rolname does, or CREATE ROLE it first.';
    END IF;
    IF p_queue_pattern IS NULL OR p_queue_pattern !~ '^([A-Za-z0-9_.:-]{1,128}|[A-Za-z0-9_.:-]{0,127}[*])$' THEN
        RAISE EXCEPTION 'jobq: queue_pattern must be a queue name, or the start of one followed by *, got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_queue_pattern, 200)), 'NULL')
            USING ERRCODE = 'JQ001',
                  HINT = '''billing.invoices'' is that queue, ''billing.*'' every queue whose name starts with '
                         '''billing.'', ''*'' every queue; _ and . stand for themselves.';
    END IF;
    IF p_privilege IS NULL OR p_privilege NOT IN ('produce', 'consume', 'read') THEN
        RAISE EXCEPTION 'jobq: privilege must be ''produce'', ''consume'' or ''read'', got %',
                coalesce(pg_catalog.quote_literal(pg_catalog.left(p_privilege, 200)), 'NULL')
            USING ERRCODE = 'JQ017',
                  HINT = 'produce: enqueue, enqueue_many, enqueue_callback; consume: claim, take, hold; '
                         'read: status, result, parent_results, watch and the rows of jobq.jobs.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_grant_args(name, text, text, boolean) IS
    'Raises the JQ error of the first bad grant_queue/revoke_queue argument (role JQ021, queue_pattern JQ001, privilege JQ017).';

CREATE FUNCTION jobq.grant_queue(role name, queue_pattern text, privilege text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Let role (and the roles that inherit from it, or SET ROLE to it)
    -- produce ('produce': enqueue, enqueue_many, enqueue_callback), consume
    -- ('consume': claim, take, hold, complete_held, fail_held) or read
    -- ('read': status, result, parent_results, watch, naming jobs in
    -- depends_on or members, and the rows of jobq.jobs, job_errors and
    -- job_dependencies) on the queues queue_pattern matches: a queue name,
    -- or a prefix followed by * ('*' alone: every queue). Opt-in: a queue
    -- that a grant of a privilege matches allows it to the roles of such
    -- grants and to jobq_admin only; a queue none matches keeps the
    -- role-level rules. It grants no EXECUTE: role still needs jobq_producer
    -- or jobq_worker. True when the grant is new, false when it was there.
    PERFORM jobq._check_grant_args(grant_queue.role, grant_queue.queue_pattern, grant_queue.privilege, false);
    INSERT INTO jobq._queue_grant AS g (role, queue_pattern, privilege, granted_by)
    VALUES (grant_queue.role, grant_queue.queue_pattern, grant_queue.privilege, jobq._caller())
    ON CONFLICT ON CONSTRAINT queue_grant_pkey DO NOTHING;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq.grant_queue(name, text, text) IS
    'Lets a role produce, consume or read on the queues a pattern matches; those queues then allow it to granted roles and jobq_admin only. True when new.';

CREATE FUNCTION jobq.revoke_queue(role name, queue_pattern text, privilege text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Remove a grant of jobq.grant_queue, named by the same arguments (the
    -- pattern as granted, not a queue it matches). True when there was one.
    -- A queue that no grant of the privilege matches any more is back to the
    -- role-level rules: every jobq_producer may produce there again, every
    -- jobq_worker consume, both read.
    PERFORM jobq._check_grant_args(revoke_queue.role, revoke_queue.queue_pattern, revoke_queue.privilege, true);
    DELETE FROM jobq._queue_grant AS g
    WHERE g.role = revoke_queue.role AND g.queue_pattern = revoke_queue.queue_pattern
      AND g.privilege = revoke_queue.privilege;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq.revoke_queue(name, text, text) IS
    'Removes a grant_queue grant (same arguments); true when there was one. Queues no grant of the privilege matches are back to the role-level rules.';

CREATE VIEW jobq.queue_grants AS
    -- Per-queue privileges (jobq.grant_queue): role may produce, consume or
    -- read on the queues queue_pattern matches. A queue that some grant of a
    -- privilege matches allows it only to those grants' roles (and their
    -- members) and jobq_admin. role_exists is false for a role dropped since
    -- the grant: the grant still restricts its queues (revoke it with
    -- jobq.revoke_queue), and a new role of that name would hold it.
    SELECT g.role, g.queue_pattern, g.privilege, g.granted_at, g.granted_by,
           EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname = g.role) AS role_exists
    FROM jobq._queue_grant AS g;
COMMENT ON VIEW jobq.queue_grants IS
    'Per-queue privileges: which role may produce, consume or read on the queues a pattern matches (jobq.grant_queue).';

CREATE FUNCTION jobq._require_pg_cron() RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Raise JQ014 unless the calling role can use pg_cron here: the
    -- extension is installed in this database, and the role has USAGE on
    -- its schema (which pg_cron grants to nobody: a superuser grants it).
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        RAISE EXCEPTION 'jobq: pg_cron is not installed in database %', pg_catalog.quote_ident(current_database())
            USING ERRCODE = 'JQ014',
                  HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name to this database and '
                         'CREATE EXTENSION pg_cron; or call jobq.reap() and jobq.prune() from your own scheduler '
                         '(pyqueue workers also reap on their own).';
    END IF;
    IF NOT pg_catalog.has_schema_privilege('cron', 'USAGE') THEN
        RAISE EXCEPTION 'jobq: role % may not use pg_cron: it has no USAGE on schema cron',
                pg_catalog.quote_ident(current_user)
            USING ERRCODE = 'JQ014',
                  HINT = pg_catalog.format('A superuser can GRANT USAGE ON SCHEMA cron TO %I. Without pg_cron, '
                                           'jobq.every(..., runner => ''workers'') has pyqueue workers run a '
                                           'periodic job, and they reap and prune on their own.', current_user);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._require_pg_cron() IS
    'Raises JQ014 when pg_cron is not installed in this database, or the calling role may not use it.';

CREATE FUNCTION jobq.schedule_maintenance(
    reap_schedule text DEFAULT '* * * * *',
    prune_schedule text DEFAULT '*/5 * * * *'
) RETURNS TABLE (job_name text, schedule text, jobid bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Register jobq.reap() and jobq.prune() with pg_cron (re-running updates
    -- the schedules). The jobs run as the calling role.
    PERFORM jobq._require_pg_cron();
    FOR job_name, schedule IN
        SELECT * FROM (VALUES ('jobq-reap', schedule_maintenance.reap_schedule),
                              ('jobq-prune', schedule_maintenance.prune_schedule)) AS s
    LOOP
        IF schedule IS NULL THEN
            RAISE EXCEPTION 'jobq: % schedule must not be NULL', job_name
                USING ERRCODE = 'JQ012', HINT = 'Use cron syntax, e.g. ''* * * * *'' (every minute).';
        END IF;
        BEGIN
            jobid := cron.schedule(job_name,
                                   schedule,
                                   CASE job_name WHEN 'jobq-reap' THEN 'SELECT jobq.reap()'
                                                 ELSE 'SELECT jobq.prune()' END);
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION 'jobq: pg_cron rejected schedule % for %', pg_catalog.quote_literal(schedule), job_name
                USING ERRCODE = 'JQ012', DETAIL = SQLERRM,
                      HINT = 'pg_cron 1.4 takes cron syntax only (five fields, one minute at the finest), e.g. ''* * * * *''.';
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq.schedule_maintenance(text, text) IS
    'Schedules jobq.reap() and jobq.prune() with pg_cron (JQ014 when pg_cron is missing).';

CREATE FUNCTION jobq.unschedule_maintenance() RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer := 0;
    v_name text;
BEGIN
    -- Remove the pg_cron jobs that jobq.schedule_maintenance() registered.
    PERFORM jobq._require_pg_cron();
    FOR v_name IN SELECT j.jobname FROM cron.job AS j WHERE j.jobname IN ('jobq-reap', 'jobq-prune') LOOP
        PERFORM cron.unschedule(v_name);
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION jobq.unschedule_maintenance() IS 'Removes jobq''s pg_cron jobs; returns how many.';

CREATE FUNCTION jobq._pg_cron_installed() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Whether the pg_cron extension is installed in this database.
    SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron')
$$;
COMMENT ON FUNCTION jobq._pg_cron_installed() IS 'True when pg_cron is installed in this database.';

CREATE FUNCTION jobq._cron_unschedule_own(p_jobname text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Remove the calling role's pg_cron job of that name; false when it has
    -- none. A pg_cron job belongs to the role that scheduled it: cron.job
    -- shows a role its own (a superuser all) and cron.unschedule(name) finds
    -- only the caller's. A role without USAGE on schema cron cannot have
    -- scheduled one, and may not even read cron.job: nothing to remove.
    -- Nested IFs: cron.job must not be parsed where pg_cron is missing.
    IF NOT jobq._pg_cron_installed() THEN
        RETURN false;
    END IF;
    IF NOT pg_catalog.has_schema_privilege('cron', 'USAGE') THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT FROM cron.job AS c
                   WHERE c.jobname = p_jobname AND c.username = current_user::text) THEN
        RETURN false;
    END IF;
    PERFORM cron.unschedule(p_jobname);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._cron_unschedule_own(text) IS
    'Removes the calling role''s pg_cron job of that name; false when it has none (or may not use pg_cron).';

CREATE FUNCTION jobq._cron_field(p_field text, p_min integer, p_max integer, p_names text[]) RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item text;
    v_parts text[];
    v_ends text[];
    v_bounds integer[];
    v_step integer;
    v_out integer[] := '{}';
BEGIN
    -- The values one field of a cron schedule allows, sorted; NULL when the
    -- field is not valid. A field is a comma list of items: *, a value, or a
    -- range a-b, each optionally with a step /n (a/n: from a to the end).
    -- Values are numbers, or names when p_names lists them (jan.., sun..).
    FOREACH v_item IN ARRAY string_to_array(lower(p_field), ',') LOOP
        v_parts := string_to_array(v_item, '/');
        IF cardinality(v_parts) NOT IN (1, 2) OR (cardinality(v_parts) = 2 AND v_parts[2] !~ '^[0-9]{1,2}$') THEN
            RETURN NULL;
        END IF;
        v_step := coalesce(v_parts[2]::integer, 1);
        IF v_step = 0 THEN
            RETURN NULL;
        END IF;
        IF v_parts[1] = '*' THEN
            v_bounds := ARRAY[p_min, p_max];
        ELSE
            v_ends := string_to_array(v_parts[1], '-');
            IF cardinality(v_ends) NOT IN (1, 2) THEN
                RETURN NULL;
            END IF;
            SELECT array_agg(CASE WHEN e.value ~ '^[0-9]{1,2}$' THEN e.value::integer
                                  ELSE array_position(p_names, e.value) + p_min - 1 END ORDER BY e.ord)
            INTO v_bounds
            FROM unnest(v_ends) WITH ORDINALITY AS e(value, ord);
            IF cardinality(v_ends) = 1 THEN
                v_bounds := ARRAY[v_bounds[1], CASE WHEN cardinality(v_parts) = 2 THEN p_max ELSE v_bounds[1] END];
            END IF;
        END IF;
        IF v_bounds[1] IS NULL OR v_bounds[2] IS NULL OR v_bounds[1] < p_min OR v_bounds[2] > p_max
           OR v_bounds[1] > v_bounds[2] THEN
            RETURN NULL;
        END IF;
        v_out := v_out || ARRAY(SELECT generate_series(v_bounds[1], v_bounds[2], v_step));
    END LOOP;
    IF cardinality(v_out) = 0 THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(SELECT DISTINCT u.v FROM unnest(v_out) AS u(v) ORDER BY u.v);
END
$$;
COMMENT ON FUNCTION jobq._cron_field(text, integer, integer, text[]) IS
    'The sorted values one cron field allows (*, a, a-b, /step, lists, names); NULL when invalid.';

CREATE FUNCTION jobq._cron_next(p_schedule text, p_after timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fields text[];
    v_minutes integer[];
    v_hours integer[];
    v_doms integer[];
    v_months integer[];
    v_dows integer[];
    v_from timestamp;
    v_day date;
    v_at timestamp;
BEGIN
    -- The first tick of a cron schedule after p_after, in UTC (as pg_cron
    -- by default); NULL when the schedule is not valid or never fires.
    -- Five fields (minute hour day-of-month month day-of-week, Sunday 0 or
    -- 7) or @hourly, @daily, @midnight, @weekly, @monthly, @yearly,
    -- @annually. As in cron, when both day fields are restricted a day
    -- matching either runs.
    v_fields := regexp_split_to_array(btrim(CASE lower(btrim(p_schedule))
        WHEN '@hourly' THEN '0 * * * *' WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
        WHEN '@weekly' THEN '0 0 * * 0' WHEN '@monthly' THEN '0 0 1 * *' WHEN '@yearly' THEN '0 0 1 1 *'
        WHEN '@annually' THEN '0 0 1 1 *' ELSE p_schedule END), '\s+');
    IF cardinality(v_fields) <> 5 THEN
        RETURN NULL;
    END IF;
    v_minutes := jobq._cron_field(v_fields[1], 0, 59, NULL);
    v_hours := jobq._cron_field(v_fields[2], 0, 23, NULL);
    v_doms := jobq._cron_field(v_fields[3], 1, 31, NULL);
    v_months := jobq._cron_field(v_fields[4], 1, 12,
                                 '{jan,feb,mar,apr,may,jun,jul,aug,sep,oct,nov,dec}');
    v_dows := jobq._cron_field(v_fields[5], 0, 7, '{sun,mon,tue,wed,thu,fri,sat}');
    IF v_minutes IS NULL OR v_hours IS NULL OR v_doms IS NULL OR v_months IS NULL OR v_dows IS NULL
       OR p_after IS NULL OR NOT isfinite(p_after) THEN
        RETURN NULL;
    END IF;
    v_dows := array_replace(v_dows, 7, 0);
    v_from := date_trunc('minute', p_after AT TIME ZONE 'UTC') + interval '1 minute';
    -- Day by day (February 29th may be eight years away), then the first
    -- hour and minute of a matching day not before v_from.
    FOR i IN 0..2930 LOOP
        v_day := v_from::date + i;
        CONTINUE WHEN NOT (extract(month FROM v_day)::integer = ANY (v_months));
        CONTINUE WHEN NOT CASE
            WHEN left(v_fields[3], 1) = '*' AND left(v_fields[5], 1) = '*' THEN true
            WHEN left(v_fields[3], 1) = '*' THEN extract(dow FROM v_day)::integer = ANY (v_dows)
            WHEN left(v_fields[5], 1) = '*' THEN extract(day FROM v_day)::integer = ANY (v_doms)
            ELSE extract(day FROM v_day)::integer = ANY (v_doms) OR extract(dow FROM v_day)::integer = ANY (v_dows)
        END;
        SELECT min(v_day + make_interval(hours => h.v, mins => m.v)) INTO v_at
        FROM unnest(v_hours) AS h(v), unnest(v_minutes) AS m(v)
        WHERE v_day + make_interval(hours => h.v, mins => m.v) >= v_from;
        IF v_at IS NOT NULL THEN
            RETURN v_at AT TIME ZONE 'UTC';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._cron_next(text, timestamptz) IS
    'The first tick (UTC) of a cron schedule after a time; NULL when the schedule is invalid or never fires.';

CREATE FUNCTION jobq._enqueue_tick(p_periodic jobq._periodic) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings jobq._queue := jobq._settings(p_periodic.queue);
BEGIN
    -- Enqueue one run of a periodic job under the job_key 'every:<name>':
    -- the new job's id, or the id of the run still active.
    RETURN jobq._insert_job(p_periodic.queue, p_periodic.payload, now(), p_periodic.priority,
                            coalesce(p_periodic.max_attempts, v_settings.max_attempts),
                            'every:' || p_periodic.name, NULL, v_settings.timeout, NULL);
END
$$;
COMMENT ON FUNCTION jobq._enqueue_tick(jobq._periodic) IS 'Enqueues one run of a periodic job (job_key every:<name>).';

CREATE FUNCTION jobq._periodic_save(
    p_name text, p_schedule text, p_queue text, p_payload jsonb, p_priority integer, p_max_attempts integer,
    p_runner text
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_next timestamptz;
BEGIN
    -- Validate and store a periodic job's definition (for jobq.every, which
    -- runs as its caller so that pg_cron runs the job as that role). Under
    -- the workers (p_runner 'workers') the schedule must be one jobq can
    -- read, and its next tick is stored for jobq.run_schedules().
    PERFORM jobq._check_periodic_name(p_name);
    PERFORM jobq._check_queue(p_queue, 'queue');
    PERFORM jobq._check_payload(p_payload, 'payload', (jobq._settings(p_queue)).max_payload_bytes);
    PERFORM jobq._check_job_options(p_priority, p_max_attempts);
    IF p_schedule IS NULL THEN
        RAISE EXCEPTION 'jobq: schedule must not be NULL'
            USING ERRCODE = 'JQ012', HINT = 'Use cron syntax, e.g. ''0 3 * * *'' (03:00 every day).';
    END IF;
    IF p_runner = 'workers' THEN
        v_next := jobq._cron_next(p_schedule, now());
        IF v_next IS NULL THEN
            RAISE EXCEPTION 'jobq: schedule % is not a cron schedule that ever fires',
                    pg_catalog.quote_literal(pg_catalog.left(p_schedule, 100))
                USING ERRCODE = 'JQ012',
                      HINT = 'Five fields, minute hour day-of-month month day-of-week, each *, a number, a range '
                             'a-b, a step /n, a list or a name (jan, mon), e.g. ''*/15 * * * *''; or @hourly, '
                             '@daily, @weekly, @monthly, @yearly. Times are UTC, one minute at the finest.';
        END IF;
    END IF;
    INSERT INTO jobq._periodic AS p (name, schedule, queue, payload, priority, max_attempts, runner, next_run_at)
    VALUES (p_name, p_schedule, p_queue, p_payload, p_priority, p_max_attempts, p_runner, v_next)
    ON CONFLICT ON CONSTRAINT _periodic_pkey DO UPDATE
    SET schedule = excluded.schedule, queue = excluded.queue, payload = excluded.payload,
        priority = excluded.priority, max_attempts = excluded.max_attempts, runner = excluded.runner,
        next_run_at = excluded.next_run_at, updated_at = now();
END
$$;
COMMENT ON FUNCTION jobq._periodic_save(text, text, text, jsonb, integer, integer, text) IS
    'Validates and stores a periodic job definition and, for the workers, its next tick (used by jobq.every).';

CREATE FUNCTION jobq._periodic_delete(p_name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Forget a periodic job's definition (for jobq.unschedule); false when unknown.
    PERFORM jobq._check_periodic_name(p_name);
    DELETE FROM jobq._periodic AS p WHERE p.name = p_name;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION jobq._periodic_delete(text) IS 'Deletes a periodic job definition (used by jobq.unschedule).';

CREATE FUNCTION jobq.every(
    name text,
    schedule text,
    queue text,
    payload jsonb DEFAULT '{}'::jsonb,
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    runner text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_jobid bigint;
    v_runner text := coalesce(every.runner, CASE WHEN jobq._pg_cron_installed() THEN 'pg_cron' ELSE 'workers' END);
BEGIN
    -- Enqueue payload on queue at every tick of a cron schedule (re-running
    -- with the same name updates it). runner 'pg_cron' has pg_cron run it
    -- (returns the pg_cron job id); 'workers' has pyqueue workers run it
    -- through jobq.run_schedules() (returns NULL); NULL picks pg_cron when
    -- it is installed. Each run uses the job_key 'every:<name>', so a slow
    -- worker never piles up copies: while one is ready, scheduled or
    -- running, the next tick adds nothing. Runs as the calling role.
    IF v_runner NOT IN ('pg_cron', 'workers') THEN
        RAISE EXCEPTION 'jobq: runner must be NULL, ''pg_cron'' or ''workers'', got %',
                pg_catalog.quote_literal(pg_catalog.left(v_runner, 100))
            USING ERRCODE = 'JQ017', HINT = 'NULL uses pg_cron when it is installed, the workers otherwise.';
    END IF;
    IF v_runner = 'workers' THEN
        PERFORM jobq._periodic_save(every.name, every.schedule, every.queue, every.payload,
                                    every.priority, every.max_attempts, 'workers');
        -- It may have moved from pg_cron to the workers (needs no privilege on pg_cron).
        PERFORM jobq._cron_unschedule_own('jobq-every:' || every.name);
        RETURN NULL;
    END IF;
    PERFORM jobq._require_pg_cron();
    PERFORM jobq._periodic_save(every.name, every.schedule, every.queue, every.payload,
                                every.priority, every.max_attempts, 'pg_cron');
    BEGIN
        v_jobid := cron.schedule('jobq-every:' || every.name, every.schedule,
                                 format('SELECT jobq.enqueue_periodic(%L)', every.name));
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'jobq: pg_cron rejected schedule %', pg_catalog.quote_literal(every.schedule)
            USING ERRCODE = 'JQ012', DETAIL = SQLERRM,
                  HINT = 'pg_cron 1.4 takes cron syntax only (five fields, one minute at the finest), e.g. ''*/5 * * * *''.';
    END;
    RETURN v_jobid;
END
$$;
COMMENT ON FUNCTION jobq.every(text, text, text, jsonb, integer, integer, text) IS
    'Schedules a periodic job, run by pg_cron (returns its job id) or by the workers (returns NULL); one active copy at a time.';

CREATE FUNCTION jobq.unschedule(name text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Remove a periodic job registered with jobq.every() (jobs it already
    -- enqueued stay), and its pg_cron entry if it has one. False when no
    -- such periodic job exists.
    IF NOT jobq._periodic_delete(unschedule.name) THEN
        RETURN false;
    END IF;
    PERFORM jobq._cron_unschedule_own('jobq-every:' || unschedule.name);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.unschedule(text) IS 'Removes a periodic job (its pg_cron entry too); false when unknown.';

CREATE FUNCTION jobq.enqueue_periodic(name text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_periodic jobq._periodic;
BEGIN
    -- What pg_cron runs at each tick of a periodic job: enqueue it under the
    -- job_key 'every:<name>'; returns the new job's id, or the id of the copy
    -- that is still active. Records the tick as the schedule's last run.
    PERFORM jobq._check_periodic_name(enqueue_periodic.name);
    SELECT * INTO v_periodic FROM jobq._periodic AS p WHERE p.name = enqueue_periodic.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'jobq: no periodic job named %', pg_catalog.quote_literal(enqueue_periodic.name)
            USING ERRCODE = 'JQ016', HINT = 'See jobq.schedules; remove stale pg_cron entries with cron.unschedule().';
    END IF;
    UPDATE jobq._periodic AS p SET last_run_at = now() WHERE p.name = v_periodic.name;
    RETURN jobq._enqueue_tick(v_periodic);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_periodic(text) IS
    'Enqueues one run of a periodic job (called by pg_cron); returns the job id, or the id of the run still active.';

CREATE FUNCTION jobq.run_schedules() RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_due jobq._periodic;
    v_next timestamptz;
BEGIN
    -- What workers call where pg_cron does not run the periodic jobs:
    -- enqueue each due tick of the schedules the workers run, and return
    -- when the next tick is due (NULL when the workers run none). Each tick
    -- is enqueued exactly once however many sessions call this at once: the
    -- schedule's row is locked (SKIP LOCKED) and moved to its next tick in
    -- the enqueueing transaction. A tick missed while nobody called this
    -- runs once, late; the ones before it are skipped (the next tick is the
    -- first after now). A tick that cannot be enqueued (e.g. its payload is
    -- now over the queue's cap) is skipped with a WARNING.
    FOR v_due IN
        SELECT p.* FROM jobq._periodic AS p
        WHERE p.runner = 'workers' AND p.next_run_at <= now()
        ORDER BY p.next_run_at
        FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
            PERFORM jobq._enqueue_tick(v_due);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'jobq: periodic job % skipped its tick at %: %', pg_catalog.quote_literal(v_due.name),
                v_due.next_run_at, SQLERRM;
        END;
        UPDATE jobq._periodic AS p
        SET last_run_at = v_due.next_run_at,
            next_run_at = jobq._cron_next(p.schedule, greatest(clock_timestamp(), v_due.next_run_at))
        WHERE p.name = v_due.name;
    END LOOP;
    SELECT min(p.next_run_at) INTO v_next FROM jobq._periodic AS p WHERE p.runner = 'workers';
    RETURN v_next;
END
$$;
COMMENT ON FUNCTION jobq.run_schedules() IS
    'Enqueues each due tick of the worker-run periodic jobs exactly once; returns when the next tick is due (NULL: none).';

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

---------------------------------------------------------------------------
-- 8. metrics (after the views it reads)
---------------------------------------------------------------------------

CREATE FUNCTION jobq.metrics() RETURNS TABLE (name text, labels jsonb, value double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- Prometheus-style samples of every known queue, from jobq.stats (so
    -- every scrape agrees, whichever host serves it): jobq_jobs by state
    -- (zeros included), jobq_oldest_ready_age_seconds (0 when nothing is
    -- ready), and the completed / failed-attempt / dead-lettered totals of
    -- the counters (never reset by pruning). Ordered by name, then labels.
    SELECT m.name, m.labels, m.value
    FROM jobq.stats AS s
    CROSS JOIN LATERAL (VALUES
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'ready'), s.ready::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'scheduled'), s.scheduled::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'running'), s.running::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'dead'), s.dead::double precision),
        ('jobq_jobs', pg_catalog.jsonb_build_object('queue', s.queue, 'state', 'waiting'), s.waiting::double precision),
        ('jobq_oldest_ready_age_seconds', pg_catalog.jsonb_build_object('queue', s.queue),
         coalesce(pg_catalog.date_part('epoch', s.oldest_ready_age), 0)),
        ('jobq_completed_total', pg_catalog.jsonb_build_object('queue', s.queue), s.completed_total::double precision),
        ('jobq_failed_total', pg_catalog.jsonb_build_object('queue', s.queue), s.failed_total::double precision),
        ('jobq_dead_total', pg_catalog.jsonb_build_object('queue', s.queue), s.dead_total::double precision)
    ) AS m(name, labels, value)
    ORDER BY m.name, m.labels
$$;
COMMENT ON FUNCTION jobq.metrics() IS
    'Metrics of every known queue as (name, labels, value) rows: jobq_jobs{queue,state}, jobq_oldest_ready_age_seconds, jobq_*_total.';

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

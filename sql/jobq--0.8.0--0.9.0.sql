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

CREATE OR REPLACE FUNCTION jobq.version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The version of the jobq SQL installed in this database.
    SELECT '0.9.0'::text
$$;
COMMENT ON FUNCTION jobq.version() IS 'Installed jobq version (semver text).';

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
    -- jobq._lock_parents uses for an id jobq never issued: linking to a job
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
CREATE OR REPLACE FUNCTION jobq.enqueue(
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
    on_parent_failure text DEFAULT 'cancel'
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
    v_settings := jobq._settings(enqueue.queue);
    IF NOT (jobq._enqueue_args_ok(enqueue.queue, enqueue.run_at, enqueue.priority, enqueue.max_attempts,
                                  enqueue.job_key, enqueue.group_key)
            AND coalesce(jsonb_typeof(enqueue.payload) = 'object'
                         AND pg_column_size(enqueue.payload) <= v_settings.max_payload_bytes, false)
            AND enqueue.timeout IS NULL AND enqueue.unique_for IS NULL
            AND enqueue.depends_on IS NULL AND enqueue.on_parent_failure IS NOT DISTINCT FROM 'cancel') THEN
        PERFORM jobq._check_queue(enqueue.queue, 'queue');
        PERFORM jobq._check_payload(enqueue.payload, 'payload', v_settings.max_payload_bytes);
        PERFORM jobq._check_time(enqueue.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue.priority, enqueue.max_attempts);
        PERFORM jobq._check_job_key(enqueue.job_key, 'job_key');
        PERFORM jobq._check_job_key(enqueue.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue.unique_for, enqueue.job_key IS NOT NULL, 'job_key');
        PERFORM jobq._check_dependencies(coalesce(enqueue.depends_on, '{}'), 'depends_on', enqueue.on_parent_failure);
    END IF;
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue.queue LIKE g.queue_like);
    IF coalesce(cardinality(enqueue.depends_on), 0) = 0 THEN
        RETURN jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                                coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                                enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for);
    END IF;
    PERFORM jobq._check_readable_jobs(enqueue.depends_on, 'depends_on');
    PERFORM jobq._lock_parents(enqueue.depends_on, 'depends_on');
    v_id := jobq._insert_job(enqueue.queue, enqueue.payload, enqueue.run_at, enqueue.priority,
                             coalesce(enqueue.max_attempts, v_settings.max_attempts), enqueue.job_key,
                             enqueue.group_key, coalesce(enqueue.timeout, v_settings.timeout), enqueue.unique_for,
                             true);
    PERFORM jobq._attach(ARRAY[v_id], enqueue.depends_on, enqueue.on_parent_failure, false);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, timestamptz, integer, integer, text, text, interval, interval, bigint[], text) IS
    'Adds one job (inside the caller''s transaction) and returns its id; a job_key held by an active job (or, with unique_for, completed within it) returns that job''s id instead; depends_on makes it wait for those jobs.';
CREATE OR REPLACE FUNCTION jobq.enqueue_many(
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
    on_parent_failure text DEFAULT 'cancel'
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
    -- job waits for the same parents.
    IF NOT (jobq._enqueue_args_ok(enqueue_many.queue, enqueue_many.run_at, enqueue_many.priority,
                                  enqueue_many.max_attempts, NULL, enqueue_many.group_key)
            AND v_n BETWEEN 0 AND 100000
            AND enqueue_many.timeout IS NULL AND enqueue_many.unique_for IS NULL
            AND enqueue_many.depends_on IS NULL AND enqueue_many.on_parent_failure IS NOT DISTINCT FROM 'cancel') THEN
        PERFORM jobq._check_queue(enqueue_many.queue, 'queue');
        IF enqueue_many.payloads IS NULL THEN
            RAISE EXCEPTION 'jobq: payloads must not be NULL'
                USING ERRCODE = 'JQ002', HINT = 'Pass an array of JSON objects, e.g. ARRAY[''{"a":1}'']::jsonb[].';
        END IF;
        PERFORM jobq._check_batch(v_n, 'cardinality(payloads)', 100000);
        PERFORM jobq._check_time(enqueue_many.run_at, 'run_at');
        PERFORM jobq._check_job_options(enqueue_many.priority, enqueue_many.max_attempts);
        PERFORM jobq._check_job_key(enqueue_many.group_key, 'group_key');
        PERFORM jobq._check_interval(enqueue_many.timeout, 'timeout', interval '1 second', interval '1 day');
        PERFORM jobq._check_unique_for(enqueue_many.unique_for, enqueue_many.job_keys IS NOT NULL, 'job_keys');
        PERFORM jobq._check_dependencies(coalesce(enqueue_many.depends_on, '{}'), 'depends_on',
                                         enqueue_many.on_parent_failure);
    END IF;
    v_settings := jobq._settings(enqueue_many.queue);
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue_many.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue_many.queue LIKE g.queue_like);

    SELECT p.payload, p.ord INTO v_bad
    FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
    WHERE p.payload IS NULL OR jsonb_typeof(p.payload) <> 'object'
       OR pg_column_size(p.payload) > v_settings.max_payload_bytes
    ORDER BY p.ord LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(v_bad.payload, format('payloads[%s]', v_bad.ord), v_settings.max_payload_bytes);
    END IF;

    IF v_waiting THEN
        PERFORM jobq._check_readable_jobs(enqueue_many.depends_on, 'depends_on');
        PERFORM jobq._lock_parents(enqueue_many.depends_on, 'depends_on');
    END IF;
    IF enqueue_many.job_keys IS NULL AND NOT v_waiting THEN
        -- No keys: one INSERT. Identity values follow the ORDER BY, so
        -- sorting the returned ids gives payload order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO jobq._job (queue, payload, run_at, priority, max_attempts, group_key, timeout)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout)
            FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
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
                                   status, parked, has_parents)
            SELECT enqueue_many.queue, p.payload, enqueue_many.run_at, enqueue_many.priority,
                   coalesce(enqueue_many.max_attempts, v_settings.max_attempts), enqueue_many.group_key,
                   coalesce(enqueue_many.timeout, v_settings.timeout), 'waiting', true, true
            FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, ord)
            ORDER BY p.ord
            RETURNING id
        )
        SELECT coalesce(array_agg(ins.id ORDER BY ins.id), '{}') INTO v_ids FROM ins;
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
        RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
        RETURN;
    END IF;

    IF cardinality(enqueue_many.job_keys) <> v_n THEN
        RAISE EXCEPTION 'jobq: job_keys has % elements but payloads has %', cardinality(enqueue_many.job_keys), v_n
            USING ERRCODE = 'JQ009', HINT = 'Pass one key (or NULL) per payload, or job_keys => NULL.';
    END IF;
    -- Pair payloads and keys by position with unnest, not by subscript:
    -- arrays may start at another index than 1 (e.g. '[0:1]={...}').
    FOR v_item IN
        SELECT x.job_key, x.ord
        FROM unnest(enqueue_many.payloads, enqueue_many.job_keys) WITH ORDINALITY AS x(payload, job_key, ord)
    LOOP
        PERFORM jobq._check_job_key(v_item.job_key, format('job_keys[%s]', v_item.ord));
    END LOOP;
    FOR v_item IN
        SELECT x.payload, x.job_key
        FROM unnest(enqueue_many.payloads, enqueue_many.job_keys) WITH ORDINALITY AS x(payload, job_key, ord)
        ORDER BY x.ord
    LOOP
        v_ids := v_ids || jobq._insert_job(enqueue_many.queue, v_item.payload, enqueue_many.run_at,
                                           enqueue_many.priority,
                                           coalesce(enqueue_many.max_attempts, v_settings.max_attempts),
                                           v_item.job_key, enqueue_many.group_key,
                                           coalesce(enqueue_many.timeout, v_settings.timeout),
                                           enqueue_many.unique_for, v_waiting);
    END LOOP;
    IF v_waiting THEN
        PERFORM jobq._attach(v_ids, enqueue_many.depends_on, enqueue_many.on_parent_failure, false);
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], timestamptz, integer, integer, text[], text, interval, interval, bigint[], text) IS
    'Adds one job per payload in one call; returns their ids in payload order (existing ids for job_keys already held); depends_on makes every one wait for those jobs.';
CREATE OR REPLACE FUNCTION jobq.enqueue_callback(
    queue text,
    payload jsonb,
    members bigint[],
    run_at timestamptz DEFAULT pg_catalog.now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL
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
    -- the payload). Returns its id. A member retried after the callback was
    -- released does not release it again.
    v_settings := jobq._settings(enqueue_callback.queue);
    PERFORM jobq._check_queue(enqueue_callback.queue, 'queue');
    PERFORM jobq._check_payload(enqueue_callback.payload, 'payload', v_settings.max_payload_bytes);
    PERFORM jobq._check_time(enqueue_callback.run_at, 'run_at');
    PERFORM jobq._check_job_options(enqueue_callback.priority, enqueue_callback.max_attempts);
    PERFORM jobq._check_dependencies(enqueue_callback.members, 'members', 'run');
    PERFORM jobq._check_queue_privilege(ARRAY[enqueue_callback.queue], 'produce')
        WHERE EXISTS (SELECT FROM jobq._queue_grant AS g
                      WHERE g.privilege = 'produce' AND enqueue_callback.queue LIKE g.queue_like);
    PERFORM jobq._check_readable_jobs(enqueue_callback.members, 'members');
    PERFORM jobq._lock_parents(enqueue_callback.members, 'members');
    v_id := jobq._insert_job(enqueue_callback.queue, enqueue_callback.payload, enqueue_callback.run_at,
                             enqueue_callback.priority,
                             coalesce(enqueue_callback.max_attempts, v_settings.max_attempts), NULL, NULL,
                             v_settings.timeout, NULL, true);
    PERFORM jobq._attach(ARRAY[v_id], enqueue_callback.members, 'run', true);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_callback(text, jsonb, bigint[], timestamptz, integer, integer) IS
    'Adds a batch callback: a job released exactly once when all members have finished, with their completed/dead/cancelled counts in its payload.';
CREATE OR REPLACE FUNCTION jobq.claim(
    queue text,
    n integer DEFAULT 1,
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
    RETURN QUERY SELECT * FROM jobq._claim(ARRAY[claim.queue], claim.n, claim.worker, claim.lease);
END
$$;
COMMENT ON FUNCTION jobq.claim(text, integer, text, interval) IS
    'Leases up to n ready jobs of a queue (FOR UPDATE SKIP LOCKED), most urgent first; ''{a,b}'' claims across queues a and b.';
CREATE OR REPLACE FUNCTION jobq.claim(
    queues text[],
    n integer DEFAULT 1,
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
    RETURN QUERY SELECT * FROM jobq._claim(claim.queues, claim.n, claim.worker, claim.lease);
END
$$;
COMMENT ON FUNCTION jobq.claim(text[], integer, text, interval) IS
    'Leases up to n ready jobs across several queues (FOR UPDATE SKIP LOCKED), most urgent first.';
CREATE OR REPLACE FUNCTION jobq.take(queue text, n integer DEFAULT 1) RETURNS SETOF jobq.job
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
        SELECT * FROM jobq._lock_ready(take.queue, take.n)
    ), done AS (
        SELECT count(*) FROM jobq._finish(ARRAY(SELECT h.id FROM held AS h), NULL, 'completed', NULL, true)
    )
    SELECT h.* FROM held AS h, done ORDER BY h.priority, h.run_at, h.id;
END
$$;
COMMENT ON FUNCTION jobq.take(text, integer) IS
    'Removes up to n ready jobs inside the caller''s transaction: done on commit, back untouched on rollback.';
CREATE OR REPLACE FUNCTION jobq.hold(queue text, n integer DEFAULT 1) RETURNS SETOF jobq.job
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
    RETURN QUERY SELECT * FROM jobq._lock_ready(hold.queue, hold.n);
END
$$;
COMMENT ON FUNCTION jobq.hold(text, integer) IS
    'Row-locks up to n ready jobs for the caller''s transaction (no lease); acknowledge with complete_held / fail_held.';
CREATE OR REPLACE FUNCTION jobq._pick(p_queues text[], p_n integer, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, lease interval)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_queue text;
    v_settings jobq._queue;
    v_now timestamptz := p_now;   -- the start time the rate limit counts (the claim's started_at)
    v_names text[] := '{}';
    v_leases interval[] := '{}';
    v_allow integer[] := '{}';
    v_rated text[] := '{}';
    v_slots integer;
    v_ids bigint[];
    v_grouped boolean;
BEGIN
    -- The full claim path. Choose (and row-lock) up to p_n ready jobs across
    -- p_queues, most urgent first, that may start now: the queue is not
    -- paused, has a free concurrency slot and rate budget, and the job heads
    -- its serial group. A limited queue's slots are counted under a row lock
    -- on its own jobq._queue row, taken with SKIP LOCKED (a busy queue
    -- yields no jobs, never a wait, and a crashed claimer's lock vanishes
    -- with its transaction; only jobq's roles can lock that row, where any
    -- role can take an advisory lock); each count runs in a statement that
    -- starts after the lock, so it sees every claim that committed before.
    -- Group heads are row-locked (SKIP LOCKED) and re-checked after the
    -- locks. A group's order is among its due jobs: a member scheduled for
    -- later that never started does not hold back the members after it (a
    -- retry waiting for its backoff, a snoozed or a waiting member does),
    -- and one that goes ahead also locks the group's oldest member
    -- (jobq._lock_group_head), so that no two members ever run at once. The
    -- jobs this path leases are parked, so the count of a queue's
    -- running jobs is an index scan (waiting jobs are parked too, and
    -- skipped). Records the starts of rate-limited queues at p_now, which
    -- the caller also stamps on the jobs as started_at. Jobs taken earlier in
    -- this transaction (take, hold) count as running.
    PERFORM jobq._check_claim_args(p_queues, p_n, p_lease);
    FOR v_queue IN SELECT DISTINCT ON (u.name) u.name FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord)
                   ORDER BY u.name, u.ord LOOP
        v_settings := jobq._settings(v_queue);
        v_slots := p_n;
        IF v_settings.paused THEN
            v_slots := 0;
        ELSIF v_settings.concurrency IS NOT NULL OR v_settings.rate_limit IS NOT NULL THEN
            PERFORM FROM jobq._queue AS q WHERE q.queue = v_queue FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                v_slots := 0;   -- another claimer is counting this queue's slots right now
            END IF;
        END IF;
        IF v_slots > 0 AND v_settings.concurrency IS NOT NULL THEN
            SELECT least(v_slots, v_settings.concurrency - count(*)
                                  - jobq._taken_in_transaction(v_queue))::integer INTO v_slots
            FROM jobq._job AS j
            WHERE j.queue = v_queue AND j.parked AND j.status = 'running';
        END IF;
        IF v_slots > 0 AND v_settings.rate_limit IS NOT NULL THEN
            DELETE FROM jobq._rate_start AS r
            WHERE r.queue = v_queue AND r.started_at <= v_now - v_settings.rate_interval;
            SELECT least(v_slots, v_settings.rate_limit - coalesce(sum(r.n), 0))::integer INTO v_slots
            FROM jobq._rate_start AS r
            WHERE r.queue = v_queue AND r.started_at > v_now - v_settings.rate_interval;
            v_rated := v_rated || v_queue;
        END IF;
        v_names := v_names || v_queue;
        v_leases := v_leases || coalesce(p_lease, v_settings.lease);
        v_allow := v_allow || greatest(v_slots, 0);
    END LOOP;

    -- Candidates: per queue, its most urgent unlocked ready rows (one index
    -- scan each); a serial-group job only when it heads its group's due
    -- members and none runs (its row lock makes this transaction the group's
    -- only claimer of it).
    SELECT array_agg(c.id ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.lease ORDER BY c.priority, c.run_at, c.id),
           array_agg(c.queue ORDER BY c.priority, c.run_at, c.id),
           coalesce(bool_or(c.grouped), false)
    INTO v_ids, v_leases, v_names, v_grouped
    FROM (
        SELECT c.id, c.priority, c.run_at, c.grouped, q.name AS queue, q.lease
        FROM unnest(v_names, v_allow, v_leases) AS q(name, slots, lease),
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

    IF v_grouped THEN
        -- Re-check group heads with a snapshot taken after the row locks: a
        -- claim of the same group that committed meanwhile is now visible.
        SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
        INTO v_ids, v_leases, v_names
        FROM unnest(v_ids, v_leases, v_names) WITH ORDINALITY AS u(id, lease, queue, ord)
        JOIN jobq._job AS j ON j.id = u.id
        WHERE j.group_key IS NULL
           OR NOT EXISTS (SELECT FROM jobq._job AS g
                          WHERE g.queue = j.queue AND g.group_key = j.group_key AND g.id <> j.id
                            AND (g.status = 'running'
                                 OR (g.id < j.id AND NOT (g.status = 'ready' AND g.run_at > now()
                                                          AND g.started_at IS NULL))));
        -- A job that goes ahead of older members not due yet also locks the
        -- group's oldest one: every claim of the group locks that same row.
        SELECT array_agg(u.id ORDER BY u.ord), array_agg(u.lease ORDER BY u.ord), array_agg(u.queue ORDER BY u.ord)
        INTO v_ids, v_leases, v_names
        FROM unnest(v_ids, v_leases, v_names) WITH ORDINALITY AS u(id, lease, queue, ord)
        JOIN jobq._job AS j ON j.id = u.id
        WHERE j.group_key IS NULL OR jobq._lock_group_head(j.queue, j.group_key, j.id);
    END IF;

    IF cardinality(v_rated) > 0 THEN
        INSERT INTO jobq._rate_start (queue, started_at, n)
        SELECT r.queue, v_now, count(*)
        FROM unnest(v_names) AS r(queue)
        WHERE r.queue = ANY (v_rated)
        GROUP BY r.queue;
    END IF;

    RETURN QUERY SELECT u.id, u.lease FROM unnest(v_ids, v_leases) AS u(id, lease);
END
$$;
COMMENT ON FUNCTION jobq._pick(text[], integer, interval, timestamptz) IS
    'Row-locks up to n ready jobs that may start now (pause, concurrency, rate limit, serial groups honoured).';
CREATE OR REPLACE FUNCTION jobq.complete_held(ids bigint[], results jsonb[] DEFAULT NULL) RETURNS integer
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
    FROM jobq._finish(v_ids, NULL, 'completed', NULL, true, complete_held.results);
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION jobq.complete_held(bigint[], jsonb[]) IS
    'Marks jobs held by this transaction done (on commit), with their results; returns how many; never waits for another holder.';
CREATE OR REPLACE FUNCTION jobq.fail_held(id bigint, error text, retry_at timestamptz DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_job jobq._job;
    v_settings jobq._queue;
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
    INSERT INTO jobq._counter (queue, bucket, failed) VALUES (v_job.queue, date_trunc('minute', now()), 1);
    PERFORM jobq._record_errors(ARRAY[v_job.id], ARRAY[v_job.attempts + 1], ARRAY[v_error], ARRAY[session_user::text]);
    IF v_job.attempts + 1 >= v_job.max_attempts THEN
        PERFORM jobq._finish(ARRAY[v_job.id], NULL, 'dead', v_error, true);
        RETURN true;
    END IF;
    v_settings := jobq._settings(v_job.queue);
    UPDATE jobq._job AS j
    SET attempts = j.attempts + 1,
        run_at = coalesce(fail_held.retry_at,
                          now() + jobq._backoff_delay(v_job.attempts + 1, v_settings.backoff_base,
                                                      v_settings.backoff_cap, v_settings.backoff_jitter,
                                                      random())),
        last_error = v_error,
        worker = session_user,
        started_at = clock_timestamp()
    WHERE j.id = v_job.id;
    PERFORM pg_notify('jobq', v_job.queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.fail_held(bigint, text, timestamptz) IS
    'Records a failed attempt of a job held by this transaction (backoff or dead letter); false when not held.';
CREATE OR REPLACE FUNCTION jobq.status(id bigint) RETURNS text
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
CREATE OR REPLACE FUNCTION jobq.result(id bigint) RETURNS jsonb
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
CREATE OR REPLACE FUNCTION jobq.parent_results(id bigint) RETURNS TABLE (parent_id bigint, result jsonb)
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
CREATE OR REPLACE FUNCTION jobq.watch(id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Ask to be told when a job finishes: a live job is marked watched, and
    -- finishing it (completed, dead or cancelled) sends NOTIFY jobq_finished
    -- with its id. Returns its state now, as jobq.status() (JQ019 for an
    -- unknown id, and for a job of a queue the caller may not read, which
    -- stays unmarked). LISTEN jobq_finished before calling this: a job that
    -- finishes in between is then either notified or already finished here.
    -- Jobs nobody watches send nothing when they finish.
    -- The mark comes first: a job finishing concurrently is then either
    -- marked before it goes (and notifies) or gone when the state is read.
    IF watch.id IS NOT NULL AND jobq._job_allowed(watch.id, 'read') THEN
        UPDATE jobq._job AS j SET watched = true WHERE j.id = watch.id AND NOT j.watched;
    END IF;
    RETURN jobq.status(watch.id);
END
$$;
COMMENT ON FUNCTION jobq.watch(bigint) IS
    'Marks a live job so that finishing it sends NOTIFY jobq_finished with its id; returns its state (as jobq.status).';
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
CREATE OR REPLACE VIEW jobq.jobs AS
    -- Every job jobq still knows, live or finished, with one status column:
    -- waiting (for parents), ready, scheduled, running, completed, dead or
    -- cancelled. heartbeat_at: the last heartbeat of a running job's lease
    -- (NULL before its first, and for jobs not running). result: what a
    -- completed job reported; cancelled_by: the ancestor whose failure
    -- cancelled it. Paged newest first by id within a queue, both halves
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
               j.group_key, j.timeout, j.heartbeat_at, NULL::jsonb AS result, NULL::bigint AS cancelled_by
        FROM jobq._job AS j
        UNION ALL
        SELECT a.id, a.queue, a.payload, a.status, a.priority::integer, a.run_at, a.attempts, a.max_attempts,
               a.job_key, a.worker, NULL::timestamptz, a.last_error, a.created_at, a.started_at, a.finished_at,
               a.group_key, a.timeout, NULL::timestamptz, a.result, a.cancelled_by
        FROM jobq._job_archive AS a
    ) AS u
    WHERE (SELECT NOT EXISTS (SELECT FROM jobq._queue_grant AS g WHERE g.privilege = 'read'))
       OR coalesce((SELECT bool_or(p.held) FROM jobq._read_pattern AS p
                    WHERE u.queue LIKE p.queue_like), true);
COMMENT ON VIEW jobq.jobs IS 'All live and finished jobs with a single status column (for operators).';
CREATE OR REPLACE VIEW jobq.job_errors AS
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
CREATE OR REPLACE VIEW jobq.job_dependencies AS
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

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

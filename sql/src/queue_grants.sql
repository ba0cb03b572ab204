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

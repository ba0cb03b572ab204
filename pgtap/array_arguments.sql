-- Array arguments are lists (since 0.9.0): more than one dimension is refused
-- with the argument's JQ SQLSTATE, a HINT and nothing changed; any lower
-- bound is accepted, and an error about one element names its own subscript.
BEGIN;
SELECT plan(17);
SET LOCAL client_min_messages = warning;

-- What p_sql does run as p_role: its first column as text ('<null>' for
-- NULL), or the error it raised as 'SQLSTATE: message | HINT: hint'.
CREATE FUNCTION pg_temp.as_role(p_role text, p_sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_result text;
    v_state text;
    v_message text;
    v_hint text;
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', p_role);
        EXECUTE p_sql INTO v_result;
        RESET ROLE;
        RETURN coalesce(v_result, '<null>');
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_hint = PG_EXCEPTION_HINT;
        RETURN v_state || ': ' || v_message || ' | HINT: ' || v_hint;
    END;
END
$$;

SELECT jobq.enqueue('lists', '{"n": 1}') AS p1 \gset
SELECT jobq.enqueue('lists', '{"n": 2}') AS p2 \gset
SELECT count(*) AS jobs_before, (SELECT count(*) FROM jobq._job_dep) AS deps_before FROM jobq._job \gset
SELECT throws_ok(format('SELECT jobq.enqueue(''lists'', ''{}'', depends_on => ARRAY[[%s], [%s]])', :p1, :p2),
                 'JQ018', 'jobq: depends_on must be a one-dimensional array, got 2 dimensions [1:2][1:1]',
                 'a two-dimensional depends_on raises JQ018 naming it (0.8.0 made one parent per element)');
SELECT throws_ok(format('SELECT jobq.enqueue_callback(''lists'', ''{}'', ARRAY[[%s, %s]])', :p1, :p2),
                 'JQ018', 'jobq: members must be a one-dimensional array, got 2 dimensions [1:1][1:2]',
                 'a two-dimensional members raises JQ018 naming it');
SELECT throws_ok(format('SELECT jobq.enqueue(''lists'', ''{}'', depends_on => ''[0:1]={%s,NULL}'')', :p1),
                 'JQ018', 'jobq: depends_on[1] is NULL',
                 'a NULL parent is named by its own subscript (0.8.0: depends_on[2] of a [0:1] array)');
SELECT throws_ok($$SELECT jobq.enqueue_many('lists', ARRAY[['{}', '{}']]::jsonb[])$$,
                 'JQ002', 'jobq: payloads must be a one-dimensional array, got 2 dimensions [1:1][1:2]',
                 'two-dimensional payloads raise JQ002 naming them (0.8.0 made one job per element)');
SELECT throws_ok($$SELECT jobq.enqueue_many('lists', '[0:2]={"{}",1,"{}"}'::jsonb[])$$,
                 'JQ002', 'jobq: payloads[1] must be a JSON object, got number',
                 'a bad payload is named by its own subscript');
SELECT throws_ok($$SELECT jobq.enqueue_many('lists', ARRAY['{}', '{}']::jsonb[], job_keys => '[5:6]={a,""}')$$,
                 'JQ009', 'jobq: job_keys[6] must be NULL or 1 to 512 characters, got 0 characters',
                 'a bad job key is named by its own subscript');
SELECT throws_ok($$SELECT jobq.enqueue_many('lists', ARRAY['{}']::jsonb[], job_keys => ARRAY[['a']])$$,
                 'JQ009', 'jobq: job_keys must be a one-dimensional array, got 2 dimensions [1:1][1:1]',
                 'two-dimensional job_keys raise JQ009 naming them');
SELECT throws_ok($$SELECT * FROM jobq.claim(ARRAY[['lists', 'other']])$$,
                 'JQ001', 'jobq: queues must be a one-dimensional array, got 2 dimensions [1:1][1:2]',
                 'claim: two-dimensional queues raise JQ001 naming them (0.8.0: a bare 0A000)');
SELECT throws_ok($$SELECT * FROM jobq.claim('[0:1]={"bad name",lists}'::text[])$$, 'JQ001', NULL,
                 'claim: a bad queue name of a [0:1] array raises JQ001');
SELECT matches((SELECT pg_temp.as_role(current_user::text,
                    $q$SELECT * FROM jobq.claim('[0:1]={"bad name",lists}'::text[])$q$)),
               '^JQ001: jobq: queues\[0\] must be', 'claim: that name is queues[0], its own subscript');
SELECT throws_ok($$SELECT jobq.next_run_at(ARRAY[['lists']])$$,
                 'JQ001', 'jobq: queues must be a one-dimensional array, got 2 dimensions [1:1][1:1]',
                 'next_run_at: two-dimensional queues raise JQ001 naming them');
SELECT throws_ok(format('SELECT jobq.complete_many(ARRAY[[%s]], ARRAY[[gen_random_uuid()]])', :p1),
                 'JQ010', 'jobq: ids must be a one-dimensional array, got 2 dimensions [1:1][1:1]',
                 'complete_many: two-dimensional ids raise JQ010 naming them (0.8.0: a bare 0A000)');
SELECT throws_ok(format('SELECT jobq.complete_held(ARRAY[[%s]])', :p1),
                 'JQ010', 'jobq: ids must be a one-dimensional array, got 2 dimensions [1:1][1:1]',
                 'complete_held: two-dimensional ids raise JQ010 naming them');
SELECT is((SELECT count(*) FROM jobq._job), :jobs_before::bigint, 'the refused calls added no job');
SELECT is((SELECT count(*) FROM jobq._job_dep), :deps_before::bigint, 'nor any parent link');
-- any lower bound is accepted
SELECT jobq.enqueue('lists', '{"child": true}', depends_on => format('[0:1]={%s,%s}', :p1, :p2)::bigint[]) AS child \gset
SELECT set_eq(format('SELECT parent_id FROM jobq._job_dep WHERE child_id = %s', :child),
              format('VALUES (%s::bigint), (%s)', :p1, :p2), 'a [0:1] depends_on links both parents');
SELECT array_agg(id)::text AS many FROM jobq.enqueue_many('lists', '[0:1]={"{\"n\": \"a\"}","{\"n\": \"b\"}"}'::jsonb[]) AS id \gset
SELECT is((SELECT array_agg(j.payload->>'n' ORDER BY j.id) FROM jobq._job AS j WHERE j.id = ANY (:'many'::bigint[])),
          ARRAY['a', 'b'], 'a [0:1] payloads array enqueues its jobs in order');

SELECT * FROM finish();
ROLLBACK;

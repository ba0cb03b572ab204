-- Bad input gets a JQ error naming the argument, with a HINT, and changes
-- nothing: live table, archive, settings and the id sequence are compared
-- with a snapshot after every call. Unknown ids return false / 0.
BEGIN;
SELECT plan(323);

-- some existing state that a bad call must not touch
DO $$ BEGIN
    PERFORM jobq.enqueue('bad', '{"a": 1}', job_key => 'k');
    PERFORM jobq.enqueue('bad', '{"a": 2}', now() + interval '1 hour');
    PERFORM jobq.enqueue('bad', '{"a": 3}', max_attempts => 1);
    PERFORM jobq.enqueue('bad', '{"a": 4}', max_attempts => 1);
    PERFORM jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('bad', 1) AS c;
    PERFORM jobq.claim('bad', 1, 'holder');
    PERFORM jobq.configure_queue('bad', lease => interval '1 minute');
    PERFORM jobq.enqueue('bad-rated', '{}');
    PERFORM jobq.configure_queue('bad-rated', rate_limit => 5, concurrency => 3);
    PERFORM jobq.claim('bad-rated', 1, 'holder2');
END $$;

CREATE FUNCTION pg_temp.jq_state() RETURNS text LANGUAGE sql AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(to_jsonb(j)::text, ',' ORDER BY id) FROM jobq._job AS j),
        (SELECT string_agg(to_jsonb(a)::text, ',' ORDER BY id) FROM jobq._job_archive AS a),
        (SELECT string_agg(to_jsonb(q)::text, ',' ORDER BY queue) FROM jobq._queue AS q),
        (SELECT string_agg(to_jsonb(p)::text, ',' ORDER BY name) FROM jobq._periodic AS p),
        (SELECT string_agg(to_jsonb(r)::text, ',' ORDER BY queue, started_at) FROM jobq._rate_start AS r),
        (SELECT string_agg(to_jsonb(c)::text, ',' ORDER BY c::text) FROM jobq._counter AS c),
        (SELECT last_value::text || is_called::text FROM jobq._job_id_seq)))
$$;
CREATE TEMP TABLE s0 AS SELECT pg_temp.jq_state() AS state,
    (SELECT count(*) FROM jobq._job) AS live, (SELECT count(*) FROM jobq._job_archive) AS archived;
CREATE TEMP TABLE errs (call text, sqlstate text, message text, hint text);

-- throws_ok + "nothing changed"; also records the error's HINT
CREATE FUNCTION pg_temp.bad(p_sql text, p_code text, p_msg text, p_desc text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v_state text; v_msg text; v_hint text;
BEGIN
    RETURN NEXT throws_ok(p_sql, p_code, p_msg, p_desc);
    BEGIN
        EXECUTE p_sql;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT, v_hint = PG_EXCEPTION_HINT;
        INSERT INTO errs VALUES (p_sql, v_state, v_msg, v_hint);
    END;
    RETURN NEXT ok(pg_temp.jq_state() = (SELECT state FROM s0), p_desc || ': nothing changed');
END
$$;
-- a call that must not raise, returning p_want, and change nothing
CREATE FUNCTION pg_temp.noop(p_sql text, p_want text, p_desc text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v_have text;
BEGIN
    EXECUTE p_sql INTO v_have;
    RETURN NEXT is(v_have, p_want, p_desc);
    RETURN NEXT ok(pg_temp.jq_state() = (SELECT state FROM s0), p_desc || ': nothing changed');
END
$$;

-- enqueue: queue --------------------------------------------------------------
SELECT pg_temp.bad($$SELECT jobq.enqueue(NULL, '{}')$$, 'JQ001',
    'jobq: queue must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got NULL', 'enqueue: queue NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue('', '{}')$$, 'JQ001',
    'jobq: queue must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got ''''', 'enqueue: queue empty');
SELECT pg_temp.bad($$SELECT jobq.enqueue(repeat('a', 129), '{}')$$, 'JQ001', NULL, 'enqueue: queue of 129 characters');
SELECT pg_temp.bad($$SELECT jobq.enqueue('a b', '{}')$$, 'JQ001',
    'jobq: queue must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got ''a b''', 'enqueue: queue with a space');
SELECT pg_temp.bad($$SELECT jobq.enqueue('x;drop table y', '{}')$$, 'JQ001', NULL, 'enqueue: queue ''x;drop table y''');
SELECT pg_temp.bad($$SELECT jobq.enqueue('café', '{}')$$, 'JQ001', NULL, 'enqueue: queue with a non-ASCII letter');
SELECT pg_temp.bad($$SELECT jobq.enqueue(E'q\n', '{}')$$, 'JQ001', NULL, 'enqueue: queue with a trailing newline');
-- enqueue: payload
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', NULL)$$, 'JQ002', 'jobq: payload must be a JSON object, got NULL', 'enqueue: payload NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '[]')$$, 'JQ002', 'jobq: payload must be a JSON object, got array', 'enqueue: payload []');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '"s"')$$, 'JQ002', 'jobq: payload must be a JSON object, got string', 'enqueue: payload "s"');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', 'null'::jsonb)$$, 'JQ002', 'jobq: payload must be a JSON object, got null', 'enqueue: payload JSON null');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '42')$$, 'JQ002', 'jobq: payload must be a JSON object, got number', 'enqueue: payload 42');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', jsonb_build_object('big', repeat('x', 1048576)))$$, 'JQ003', NULL,
    'enqueue: payload over 1 MiB');
SELECT throws_like($$SELECT jobq.enqueue('bad', jsonb_build_object('big', repeat('x', 1048576)))$$,
    'jobq: payload is % bytes, over the queue''s cap of 1048576 bytes', 'enqueue: the JQ003 message names payload, its size and the cap');
-- enqueue: priority, max_attempts
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', priority => 40000)$$, 'JQ004',
    'jobq: priority must be between -32768 and 32767, got 40000', 'enqueue: priority 40000');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', priority => -40000)$$, 'JQ004', NULL, 'enqueue: priority -40000');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', priority => NULL)$$, 'JQ004',
    'jobq: priority must be between -32768 and 32767, got NULL', 'enqueue: priority NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', max_attempts => 0)$$, 'JQ005',
    'jobq: max_attempts must be between 1 and 1000, got 0', 'enqueue: max_attempts 0');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', max_attempts => 1001)$$, 'JQ005', NULL, 'enqueue: max_attempts 1001');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', max_attempts => -1)$$, 'JQ005', NULL, 'enqueue: max_attempts -1');
-- enqueue: run_at
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', NULL)$$, 'JQ006',
    'jobq: run_at must be a finite time within 10 years of now, got NULL', 'enqueue: run_at NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', 'infinity')$$, 'JQ006',
    'jobq: run_at must be a finite time within 10 years of now, got infinity', 'enqueue: run_at infinity');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', '-infinity')$$, 'JQ006', NULL, 'enqueue: run_at -infinity');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', now() + interval '11 years')$$, 'JQ006', NULL, 'enqueue: run_at 11 years ahead');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', now() - interval '11 years')$$, 'JQ006', NULL, 'enqueue: run_at 11 years ago');
-- enqueue: job_key
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', job_key => '')$$, 'JQ009',
    'jobq: job_key must be NULL or 1 to 512 characters, got 0 characters', 'enqueue: job_key empty');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', job_key => repeat('k', 600))$$, 'JQ009',
    'jobq: job_key must be NULL or 1 to 512 characters, got 600 characters', 'enqueue: job_key of 600 characters');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', job_key => repeat('k', 513))$$, 'JQ009', NULL, 'enqueue: job_key of 513 characters');
-- enqueue: group_key
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', group_key => '')$$, 'JQ009',
    'jobq: group_key must be NULL or 1 to 512 characters, got 0 characters', 'enqueue: group_key empty');
SELECT pg_temp.bad($$SELECT jobq.enqueue('bad', '{}', group_key => repeat('g', 513))$$, 'JQ009',
    'jobq: group_key must be NULL or 1 to 512 characters, got 513 characters', 'enqueue: group_key of 513 characters');

-- enqueue_many -------------------------------------------------------------------
SELECT pg_temp.bad($$SELECT jobq.enqueue_many(NULL, ARRAY['{}']::jsonb[])$$, 'JQ001', NULL, 'enqueue_many: queue NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('a b', ARRAY['{}']::jsonb[])$$, 'JQ001', NULL, 'enqueue_many: queue ''a b''');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', NULL)$$, 'JQ002', 'jobq: payloads must not be NULL', 'enqueue_many: payloads NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}', '{}', '"s"']::jsonb[])$$, 'JQ002',
    'jobq: payloads[3] must be a JSON object, got string', 'enqueue_many: payloads[3] a string (earlier rows not inserted)');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}', NULL]::jsonb[])$$, 'JQ002',
    'jobq: payloads[2] must be a JSON object, got NULL', 'enqueue_many: payloads[2] NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['[]', '{}']::jsonb[])$$, 'JQ002',
    'jobq: payloads[1] must be a JSON object, got array', 'enqueue_many: payloads[1] an array');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}', 'null', '7']::jsonb[])$$, 'JQ002',
    'jobq: payloads[2] must be a JSON object, got null', 'enqueue_many: the first bad element is named');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}'::jsonb, jsonb_build_object('big', repeat('x', 1048576))])$$, 'JQ003', NULL,
    'enqueue_many: payloads[2] over 1 MiB');
SELECT throws_like($$SELECT jobq.enqueue_many('bad', ARRAY['{}'::jsonb, jsonb_build_object('big', repeat('x', 1048576))])$$,
    'jobq: payloads[2] is % bytes, over the queue''s cap of 1048576 bytes', 'enqueue_many: the JQ003 message names payloads[2]');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}', '{}']::jsonb[], job_keys => ARRAY['a'])$$, 'JQ009',
    'jobq: job_keys has 1 elements but payloads has 2', 'enqueue_many: job_keys shorter than payloads');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}']::jsonb[], job_keys => ARRAY['a', 'b'])$$, 'JQ009', NULL,
    'enqueue_many: job_keys longer than payloads');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}', '{}']::jsonb[], job_keys => ARRAY['new-key', ''])$$, 'JQ009',
    'jobq: job_keys[2] must be NULL or 1 to 512 characters, got 0 characters', 'enqueue_many: job_keys[2] empty (job 1 not inserted)');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}']::jsonb[], priority => 40000)$$, 'JQ004', NULL, 'enqueue_many: priority 40000');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}']::jsonb[], priority => NULL)$$, 'JQ004', NULL, 'enqueue_many: priority NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}']::jsonb[], max_attempts => 0)$$, 'JQ005', NULL, 'enqueue_many: max_attempts 0');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}']::jsonb[], run_at => 'infinity')$$, 'JQ006', NULL, 'enqueue_many: run_at infinity');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}']::jsonb[], run_at => NULL)$$, 'JQ006', NULL, 'enqueue_many: run_at NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', array_fill('{}'::jsonb, ARRAY[100001]))$$, 'JQ007', NULL,
    'enqueue_many: more than 100000 payloads');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}']::jsonb[], group_key => '')$$, 'JQ009',
    'jobq: group_key must be NULL or 1 to 512 characters, got 0 characters', 'enqueue_many: group_key empty');
SELECT pg_temp.bad($$SELECT jobq.enqueue_many('bad', ARRAY['{}', '{}']::jsonb[], job_keys => ARRAY['a', 'b'], group_key => repeat('g', 513))$$,
    'JQ009', NULL, 'enqueue_many: group_key of 513 characters (with job_keys)');

-- claim ----------------------------------------------------------------------------
SELECT pg_temp.bad($$SELECT jobq.claim(NULL::text)$$, 'JQ001', NULL, 'claim: queue NULL');
SELECT pg_temp.bad($$SELECT jobq.claim('')$$, 'JQ001', NULL, 'claim: queue empty');
SELECT pg_temp.bad($$SELECT jobq.claim('x;drop table y')$$, 'JQ001', NULL, 'claim: queue ''x;drop table y''');
SELECT pg_temp.bad($$SELECT jobq.claim(NULL::text[])$$, 'JQ001', NULL, 'claim: queues NULL');
SELECT pg_temp.bad($$SELECT jobq.claim('{}'::text[])$$, 'JQ001', NULL, 'claim: queues empty');
SELECT pg_temp.bad($$SELECT jobq.claim(ARRAY['bad', NULL])$$, 'JQ001',
    'jobq: queues[2] must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got NULL', 'claim: queues[2] NULL');
SELECT pg_temp.bad($$SELECT jobq.claim(ARRAY(SELECT 'q' || g FROM generate_series(1, 101) AS g))$$, 'JQ001', NULL, 'claim: 101 queues');
SELECT pg_temp.bad($$SELECT jobq.claim('bad', NULL)$$, 'JQ007', 'jobq: n must be between 0 and 1000, got NULL', 'claim: n NULL (never "everything")');
SELECT pg_temp.bad($$SELECT jobq.claim('bad', -1)$$, 'JQ007', 'jobq: n must be between 0 and 1000, got -1', 'claim: n -1');
SELECT pg_temp.bad($$SELECT jobq.claim('bad', 1001)$$, 'JQ007', NULL, 'claim: n 1001');
SELECT pg_temp.bad($$SELECT jobq.claim(ARRAY['bad'], NULL)$$, 'JQ007', NULL, 'claim(text[]): n NULL');
SELECT pg_temp.bad($$SELECT jobq.claim('bad', lease => interval '0 s')$$, 'JQ008', NULL, 'claim: lease 0 s');
SELECT pg_temp.bad($$SELECT jobq.claim('bad', lease => interval '2 days')$$, 'JQ008', NULL, 'claim: lease 2 days');
SELECT pg_temp.bad($$SELECT jobq.claim('bad', lease => interval '-5 minutes')$$, 'JQ008', NULL, 'claim: negative lease');
SELECT pg_temp.bad($$SELECT jobq.claim('bad', worker => repeat('w', 300))$$, 'JQ011',
    'jobq: worker must be at most 200 characters, got 300', 'claim: worker of 300 characters');

-- take ---------------------------------------------------------------------------------
SELECT pg_temp.bad($$SELECT jobq.take(NULL)$$, 'JQ001',
    'jobq: queue must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got NULL', 'take: queue NULL');
SELECT pg_temp.bad($$SELECT jobq.take('a b')$$, 'JQ001', NULL, 'take: queue ''a b''');
SELECT pg_temp.bad($$SELECT jobq.take('bad', NULL)$$, 'JQ007', 'jobq: n must be between 0 and 1000, got NULL',
    'take: n NULL (never "everything")');
SELECT pg_temp.bad($$SELECT jobq.take('bad', -1)$$, 'JQ007', NULL, 'take: n -1');
SELECT pg_temp.bad($$SELECT jobq.take('bad', 1001)$$, 'JQ007', NULL, 'take: n 1001');
SELECT pg_temp.bad($$SELECT jobq.take('bad-rated', NULL)$$, 'JQ007', NULL, 'take: n NULL on a rate-limited queue (no window row recorded)');

-- hold, complete_held, fail_held (0.3.0) ---------------------------------------------------
SELECT pg_temp.bad($$SELECT jobq.hold(NULL)$$, 'JQ001',
    'jobq: queue must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got NULL', 'hold: queue NULL');
SELECT pg_temp.bad($$SELECT jobq.hold('a b')$$, 'JQ001', NULL, 'hold: queue ''a b''');
SELECT pg_temp.bad($$SELECT jobq.hold('bad', NULL)$$, 'JQ007', 'jobq: n must be between 0 and 1000, got NULL',
    'hold: n NULL (never "everything")');
SELECT pg_temp.bad($$SELECT jobq.hold('bad', -1)$$, 'JQ007', NULL, 'hold: n -1');
SELECT pg_temp.bad($$SELECT jobq.hold('bad', 1001)$$, 'JQ007', NULL, 'hold: n 1001');
SELECT pg_temp.bad($$SELECT jobq.hold('bad-rated', NULL)$$, 'JQ007', NULL, 'hold: n NULL on a rate-limited queue (no window row recorded)');
SELECT pg_temp.bad($$SELECT jobq.complete_held(NULL)$$, 'JQ010', 'jobq: ids must be an array of job ids without NULL',
    'complete_held: ids NULL');
SELECT pg_temp.bad($$SELECT jobq.complete_held(ARRAY[(SELECT min(id) FROM jobq._job WHERE queue = 'bad' AND status = 'ready'), NULL])$$,
    'JQ010', 'jobq: ids must be an array of job ids without NULL', 'complete_held: a NULL among ids (the good id is not completed)');
SELECT pg_temp.bad($$SELECT jobq.complete_held('{NULL}'::bigint[])$$, 'JQ010', NULL, 'complete_held: ids {NULL}');
SELECT pg_temp.bad($$SELECT jobq.complete_held(ARRAY(SELECT g::bigint FROM generate_series(1, 10001) AS g))$$, 'JQ007',
    'jobq: cardinality(ids) must be between 0 and 10000, got 10001', 'complete_held: 10,001 ids');
SELECT pg_temp.bad($$SELECT jobq.fail_held(NULL, 'e')$$, 'JQ010', 'jobq: id must not be NULL', 'fail_held: id NULL');
SELECT pg_temp.bad($$SELECT jobq.fail_held((SELECT min(id) FROM jobq._job WHERE queue = 'bad' AND status = 'ready'), 'e', 'infinity')$$,
    'JQ006', NULL, 'fail_held: retry_at infinity (checked before the job is touched)');
SELECT pg_temp.bad($$SELECT jobq.fail_held((SELECT min(id) FROM jobq._job WHERE queue = 'bad' AND status = 'ready'), 'e', now() + interval '11 years')$$,
    'JQ006', NULL, 'fail_held: retry_at 11 years ahead');
SELECT pg_temp.bad($$SELECT jobq.fail_held((SELECT min(id) FROM jobq._job WHERE queue = 'bad' AND status = 'ready'), 'e', '-infinity')$$,
    'JQ006', NULL, 'fail_held: retry_at -infinity');
SELECT pg_temp.bad($$SELECT jobq.claim('bad-rated', -1)$$, 'JQ007', NULL, 'claim: n -1 on a rate-limited queue (no window row recorded)');

-- complete, complete_many, fail, heartbeat, release, snooze ------------------------------
SELECT pg_temp.bad($$SELECT jobq.complete(NULL, gen_random_uuid())$$, 'JQ010', 'jobq: id must not be NULL', 'complete: id NULL');
SELECT pg_temp.bad($$SELECT jobq.complete(1, NULL)$$, 'JQ010', 'jobq: lease_token must not be NULL', 'complete: lease_token NULL');
SELECT pg_temp.bad($$SELECT jobq.fail(NULL, 'e', gen_random_uuid())$$, 'JQ010', 'jobq: id must not be NULL', 'fail: id NULL');
SELECT pg_temp.bad($$SELECT jobq.fail(1, 'e', NULL)$$, 'JQ010', 'jobq: lease_token must not be NULL', 'fail: lease_token NULL');
SELECT pg_temp.bad($$SELECT jobq.fail(c.id, 'e', c.lease_token, 'infinity') FROM (SELECT id, lease_token FROM jobq._job WHERE worker = 'holder') AS c$$,
    'JQ006', 'jobq: retry_at must be a finite time within 10 years of now, got infinity', 'fail: retry_at infinity (even with the right token)');
SELECT pg_temp.bad($$SELECT jobq.fail(c.id, 'e', c.lease_token, now() + interval '11 years') FROM (SELECT id, lease_token FROM jobq._job WHERE worker = 'holder') AS c$$,
    'JQ006', NULL, 'fail: retry_at 11 years ahead');
SELECT pg_temp.bad($$SELECT jobq.heartbeat(NULL, gen_random_uuid())$$, 'JQ010', NULL, 'heartbeat: id NULL');
SELECT pg_temp.bad($$SELECT jobq.heartbeat(1, NULL)$$, 'JQ010', NULL, 'heartbeat: lease_token NULL');
SELECT pg_temp.bad($$SELECT jobq.heartbeat(c.id, c.lease_token, interval '0 s') FROM (SELECT id, lease_token FROM jobq._job WHERE worker = 'holder') AS c$$,
    'JQ008', NULL, 'heartbeat: extend 0 s');
SELECT pg_temp.bad($$SELECT jobq.heartbeat(c.id, c.lease_token, interval '2 days') FROM (SELECT id, lease_token FROM jobq._job WHERE worker = 'holder') AS c$$,
    'JQ008', NULL, 'heartbeat: extend 2 days');
SELECT pg_temp.bad($$SELECT jobq.release(NULL, gen_random_uuid())$$, 'JQ010', NULL, 'release: id NULL');
SELECT pg_temp.bad($$SELECT jobq.release(1, NULL)$$, 'JQ010', NULL, 'release: lease_token NULL');
SELECT pg_temp.bad($$SELECT jobq.snooze(NULL, gen_random_uuid(), now())$$, 'JQ010', 'jobq: id must not be NULL', 'snooze: id NULL');
SELECT pg_temp.bad($$SELECT jobq.snooze(1, NULL, now())$$, 'JQ010', 'jobq: lease_token must not be NULL', 'snooze: lease_token NULL');
SELECT pg_temp.bad($$SELECT jobq.snooze(c.id, c.lease_token, NULL) FROM (SELECT id, lease_token FROM jobq._job WHERE worker = 'holder') AS c$$,
    'JQ006', 'jobq: run_at must be a finite time within 10 years of now, got NULL', 'snooze: run_at NULL (even with the right token)');
SELECT pg_temp.bad($$SELECT jobq.snooze(c.id, c.lease_token, 'infinity') FROM (SELECT id, lease_token FROM jobq._job WHERE worker = 'holder') AS c$$,
    'JQ006', NULL, 'snooze: run_at infinity');
SELECT pg_temp.bad($$SELECT jobq.snooze(c.id, c.lease_token, now() + interval '11 years') FROM (SELECT id, lease_token FROM jobq._job WHERE worker = 'holder') AS c$$,
    'JQ006', NULL, 'snooze: run_at 11 years ahead');
SELECT pg_temp.bad($$SELECT jobq.complete_many(ARRAY[1, 2]::bigint[], ARRAY[gen_random_uuid()])$$, 'JQ010',
    'jobq: ids and lease_tokens must be arrays of the same length', 'complete_many: length mismatch');
SELECT pg_temp.bad($$SELECT jobq.complete_many(NULL, ARRAY[gen_random_uuid()])$$, 'JQ010', NULL, 'complete_many: ids NULL');
SELECT pg_temp.bad($$SELECT jobq.complete_many(ARRAY[1]::bigint[], NULL)$$, 'JQ010', NULL, 'complete_many: lease_tokens NULL');
SELECT pg_temp.bad($$SELECT jobq.complete_many(ARRAY[1, NULL]::bigint[], ARRAY[gen_random_uuid(), gen_random_uuid()])$$, 'JQ010',
    'jobq: ids and lease_tokens must not contain NULL', 'complete_many: a NULL id');
SELECT pg_temp.bad($$SELECT jobq.complete_many(ARRAY[1, 2]::bigint[], ARRAY[gen_random_uuid(), NULL])$$, 'JQ010', NULL,
    'complete_many: a NULL lease token');
SELECT pg_temp.bad($$SELECT jobq.complete_many(ARRAY(SELECT generate_series(1, 10001)::bigint), ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10001)))$$,
    'JQ007', NULL, 'complete_many: more than 10000 ids');

-- maintenance and operator calls ------------------------------------------------------------
SELECT pg_temp.bad($$SELECT jobq.reap(NULL)$$, 'JQ007', NULL, 'reap: n NULL');
SELECT pg_temp.bad($$SELECT jobq.reap(-1)$$, 'JQ007', NULL, 'reap: n -1');
SELECT pg_temp.bad($$SELECT jobq.prune(NULL)$$, 'JQ007', NULL, 'prune: n NULL');
SELECT pg_temp.bad($$SELECT jobq.prune(-1)$$, 'JQ007', NULL, 'prune: n -1');
SELECT pg_temp.bad($$SELECT jobq.cancel(NULL)$$, 'JQ010', 'jobq: id must not be NULL', 'cancel: id NULL');
SELECT pg_temp.bad($$SELECT jobq.retry(NULL)$$, 'JQ010', 'jobq: id must not be NULL', 'retry: id NULL');
SELECT pg_temp.bad($$SELECT jobq.retry_dead(NULL)$$, 'JQ001', NULL, 'retry_dead: queue NULL');
SELECT pg_temp.bad($$SELECT jobq.retry_dead('')$$, 'JQ001', NULL, 'retry_dead: queue empty');
SELECT pg_temp.bad($$SELECT jobq.configure_queue(NULL, max_attempts => 3)$$, 'JQ001', NULL, 'configure_queue: queue NULL');
SELECT pg_temp.bad($$SELECT jobq.configure_queue('bad', lease => interval '0 s')$$, 'JQ012', NULL, 'configure_queue: lease 0 s');
SELECT pg_temp.bad($$SELECT jobq.configure_queue('bad', concurrency => -1)$$, 'JQ012',
    'jobq: setting concurrency is out of range', 'configure_queue: concurrency -1');
SELECT pg_temp.bad($$SELECT jobq.configure_queue('bad', concurrency => 10001)$$, 'JQ012',
    'jobq: setting concurrency is out of range', 'configure_queue: concurrency 10001');
SELECT pg_temp.bad($$SELECT jobq.configure_queue('bad', rate_limit => -5)$$, 'JQ012',
    'jobq: setting rate_limit is out of range', 'configure_queue: rate_limit -5');
SELECT pg_temp.bad($$SELECT jobq.configure_queue('bad', rate_limit => 1000001)$$, 'JQ012',
    'jobq: setting rate_limit is out of range', 'configure_queue: rate_limit 1000001');
SELECT pg_temp.bad($$SELECT jobq.configure_queue('bad', rate_limit => 5, rate_interval => interval '500 ms')$$, 'JQ012',
    'jobq: setting rate_interval is out of range', 'configure_queue: rate_interval 500 ms (rate_limit not set either)');
SELECT pg_temp.bad($$SELECT jobq.configure_queue('bad', rate_interval => interval '2 days')$$, 'JQ012',
    'jobq: setting rate_interval is out of range', 'configure_queue: rate_interval 2 days');
SELECT pg_temp.bad($$SELECT jobq.configure_queue('bad-rated', concurrency => 0, rate_interval => interval '0 s')$$, 'JQ012', NULL,
    'configure_queue: a bad rate_interval keeps the concurrency limit that 0 would have removed');
SELECT pg_temp.bad($$SELECT jobq.pause(NULL)$$, 'JQ001', NULL, 'pause: queue NULL');
SELECT pg_temp.bad($$SELECT jobq.pause('a b')$$, 'JQ001', NULL, 'pause: queue ''a b''');
SELECT pg_temp.bad($$SELECT jobq.resume('')$$, 'JQ001', NULL, 'resume: queue empty');
SELECT pg_temp.bad($$SELECT jobq.enqueue_periodic(NULL)$$, 'JQ016',
    'jobq: name must be 1 to 64 characters from [A-Za-z0-9_.:-], got NULL', 'enqueue_periodic: name NULL');
SELECT pg_temp.bad($$SELECT jobq.enqueue_periodic('a b')$$, 'JQ016',
    'jobq: name must be 1 to 64 characters from [A-Za-z0-9_.:-], got ''a b''', 'enqueue_periodic: name with a space');
SELECT pg_temp.bad($$SELECT jobq.enqueue_periodic(repeat('n', 65))$$, 'JQ016', NULL, 'enqueue_periodic: name of 65 characters');
SELECT pg_temp.bad($$SELECT jobq.enqueue_periodic('no-such-job')$$, 'JQ016',
    'jobq: no periodic job named ''no-such-job''', 'enqueue_periodic: unknown name');
SELECT pg_temp.bad($$SELECT jobq.reset_queue('a b')$$, 'JQ001', NULL, 'reset_queue: queue ''a b''');
SELECT pg_temp.bad($$SELECT jobq.next_run_at(NULL)$$, 'JQ001', NULL, 'next_run_at: queues NULL');
SELECT pg_temp.bad($$SELECT jobq.next_run_at('{}')$$, 'JQ001', NULL, 'next_run_at: queues empty');

-- unknown ids: false / 0, never an exception, never a change ------------------------------
SELECT pg_temp.noop($$SELECT jobq.complete(-1, gen_random_uuid())$$, 'false', 'complete of an unknown id returns false');
SELECT pg_temp.noop($$SELECT jobq.fail(-1, 'e', gen_random_uuid())$$, 'false', 'fail of an unknown id returns false');
SELECT pg_temp.noop($$SELECT jobq.heartbeat(-1, gen_random_uuid())$$, 'false', 'heartbeat of an unknown id returns false');
SELECT pg_temp.noop($$SELECT jobq.release(-1, gen_random_uuid())$$, 'false', 'release of an unknown id returns false');
SELECT pg_temp.noop($$SELECT jobq.snooze(-1, gen_random_uuid(), now())$$, 'false', 'snooze of an unknown id returns false');
SELECT pg_temp.noop($$SELECT jobq.snooze(c.id, gen_random_uuid(), now()) FROM (SELECT id FROM jobq._job WHERE worker = 'holder') AS c$$,
    'false', 'snooze with a wrong lease token returns false');
SELECT pg_temp.noop($$SELECT jobq.resume('no-such-queue')$$, 'false', 'resume of an unknown queue returns false');
SELECT pg_temp.noop($$SELECT jobq.resume('bad')$$, 'false', 'resume of a queue that is not paused returns false');
SELECT pg_temp.noop($$SELECT count(*) FROM jobq.take('no-such-queue', 1000)$$, '0', 'take of an unknown queue returns no rows');
SELECT pg_temp.noop($$SELECT count(*) FROM jobq.take('bad', 0)$$, '0', 'take with n = 0 returns no rows');
SELECT pg_temp.noop($$SELECT count(*) FROM jobq.hold('no-such-queue', 1000)$$, '0', 'hold of an unknown queue returns no rows');
SELECT pg_temp.noop($$SELECT count(*) FROM jobq.hold('bad', 0)$$, '0', 'hold with n = 0 returns no rows');
SELECT pg_temp.noop($$SELECT count(*) FROM jobq.hold('bad', 5)$$, '1',
    'hold on a plain queue returns its one due ready job and writes nothing (no lease, no counter)');
SELECT pg_temp.noop($$SELECT jobq.complete_held('{}')$$, '0', 'complete_held of no ids returns 0');
SELECT pg_temp.noop($$SELECT jobq.complete_held(ARRAY[-1, -2]::bigint[])$$, '0', 'complete_held of unknown ids returns 0');
SELECT pg_temp.noop($$SELECT jobq.complete_held(ARRAY(SELECT id FROM jobq._job WHERE status = 'running'))$$, '0',
    'complete_held leaves leased (running) jobs alone');
SELECT pg_temp.noop($$SELECT jobq.fail_held(-1, 'e')$$, 'false', 'fail_held of an unknown id returns false');
SELECT pg_temp.noop($$SELECT jobq.fail_held((SELECT id FROM jobq._job WHERE worker = 'holder'), 'e')$$, 'false',
    'fail_held of a leased (running) job returns false');
SELECT pg_temp.noop($$SELECT jobq.cancel(-1)$$, 'false', 'cancel of an unknown id returns false');
SELECT pg_temp.noop($$SELECT jobq.retry(-1)$$, 'false', 'retry of an unknown id returns false');
SELECT pg_temp.noop($$SELECT jobq.complete_many(ARRAY[-1, -2]::bigint[], ARRAY[gen_random_uuid(), gen_random_uuid()])$$, '0',
    'complete_many of unknown ids returns 0');
SELECT pg_temp.noop($$SELECT jobq.retry_dead('no-such-queue')$$, '0', 'retry_dead of an unknown queue returns 0');
SELECT pg_temp.noop($$SELECT jobq.reset_queue('no-such-queue')$$, 'false', 'reset_queue of an unknown queue returns false');
SELECT pg_temp.noop($$SELECT count(*) FROM jobq.claim('no-such-queue', 1000)$$, '0', 'claim of an unknown queue returns no rows');

-- every JQ error above carried a HINT; the state never moved ------------------------------------
SELECT cmp_ok((SELECT count(*)::int FROM errs), '>=', 90, 'every bad call above was caught and recorded');
SELECT is_empty($$SELECT call, sqlstate FROM errs WHERE sqlstate NOT LIKE 'JQ%'$$, 'every bad call raised a JQ SQLSTATE');
SELECT is_empty($$SELECT call FROM errs WHERE coalesce(hint, '') = ''$$, 'every JQ error has a HINT');
SELECT is_empty($$SELECT call FROM errs WHERE message NOT LIKE 'jobq: %'$$, 'every JQ message starts with ''jobq: ''');
SELECT results_eq($$SELECT count(*) FROM jobq._job UNION ALL SELECT count(*) FROM jobq._job_archive$$,
                  $$SELECT live FROM s0 UNION ALL SELECT archived FROM s0$$,
                  'row counts of jobq._job and jobq._job_archive are as before');

SELECT * FROM finish();
ROLLBACK;

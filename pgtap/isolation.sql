-- claim and take need READ COMMITTED (they count running jobs and group
-- heads after taking their locks, which needs a fresh snapshot per
-- statement): at REPEATABLE READ they raise JQ015 and change nothing.
-- The isolation level cannot change after a transaction's first query, so
-- this whole file runs at REPEATABLE READ; SERIALIZABLE is tested from
-- pytest (tests/test_coordination.py).
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT plan(13);

SELECT is(current_setting('transaction_isolation'), 'repeatable read', 'setup: this transaction runs at REPEATABLE READ');
SELECT isnt(jobq.enqueue('iso', '{"i": 1}'), NULL, 'enqueue works at any isolation level');
SELECT isnt(jobq.enqueue('iso', '{"i": 2}', group_key => 'g'), NULL, 'so does enqueue with a group_key');
CREATE TEMP TABLE snap AS SELECT to_jsonb(j) AS row FROM jobq._job AS j;

SELECT throws_ok($$SELECT jobq._check_read_committed()$$, 'JQ015',
                 'jobq: claiming needs READ COMMITTED isolation, not repeatable read',
                 '_check_read_committed() raises JQ015 naming the isolation level');
SELECT throws_ok($$SELECT * FROM jobq.claim('iso')$$, 'JQ015', NULL, 'claim(text) raises JQ015');
SELECT throws_ok($$SELECT * FROM jobq.claim(ARRAY['iso'], 5, 'w')$$, 'JQ015', NULL, 'claim(text[]) raises JQ015');
SELECT throws_ok($$SELECT * FROM jobq.claim('iso', 0)$$, 'JQ015', NULL, 'even claim with n = 0');
SELECT throws_ok($$SELECT * FROM jobq.take('iso', 5)$$, 'JQ015', NULL, 'take raises JQ015');
SELECT set_eq($$SELECT to_jsonb(j) FROM jobq._job AS j$$, $$SELECT row FROM snap$$, 'the refused calls changed nothing');

CREATE TEMP TABLE err (hint text);
DO $$
DECLARE
    v_hint text;
BEGIN
    PERFORM jobq.claim('iso');
EXCEPTION WHEN SQLSTATE 'JQ015' THEN
    GET STACKED DIAGNOSTICS v_hint = PG_EXCEPTION_HINT;
    INSERT INTO err VALUES (v_hint);
END
$$;
SELECT matches((SELECT hint FROM err), 'READ COMMITTED', 'the JQ015 HINT says how to claim instead');

-- Acknowledging needs no fresh snapshot: it works at any level. A job put
-- into the running state by hand stands in for one claimed earlier.
UPDATE jobq._job SET status = 'running', attempts = 1, lease_token = '00000000-0000-0000-0000-000000000001',
                     lease_expires_at = now() + interval '1 minute', started_at = now()
WHERE payload = '{"i": 1}';
SELECT ok(jobq.heartbeat(id, '00000000-0000-0000-0000-000000000001'), 'heartbeat works at REPEATABLE READ')
FROM jobq._job WHERE payload = '{"i": 1}';
SELECT ok(jobq.snooze(id, '00000000-0000-0000-0000-000000000001', now() + interval '1 minute'), 'snooze works at REPEATABLE READ')
FROM jobq._job WHERE payload = '{"i": 1}';
SELECT is(jobq.reap(), 0, 'reap works at REPEATABLE READ');

SELECT * FROM finish();
ROLLBACK;

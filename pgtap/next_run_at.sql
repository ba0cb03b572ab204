-- jobq.next_run_at(queues): the earliest future run_at of ready jobs.
BEGIN;
SELECT plan(17);

SELECT is(jobq.next_run_at(ARRAY['nr']), NULL, 'an empty queue: NULL');
DO $$ BEGIN PERFORM jobq.enqueue('nr', '{}', now() - interval '1 minute'); PERFORM jobq.enqueue('nr', '{}'); END $$;
SELECT is(jobq.next_run_at(ARRAY['nr']), NULL, 'only ready-now jobs: NULL (nothing to wait for)');

DO $$ BEGIN
    PERFORM jobq.enqueue('nr', '{}', now() + interval '10 minutes', 0);
    PERFORM jobq.enqueue('nr', '{}', now() + interval '5 minutes', 3);
    PERFORM jobq.enqueue('nr', '{}', now() + interval '20 minutes', -1);
END $$;
SELECT is(jobq.next_run_at(ARRAY['nr']), now() + interval '5 minutes', 'the earliest future run_at, whatever its priority');

DO $$ BEGIN
    PERFORM jobq.enqueue('nr2', '{}', now() + interval '2 minutes', 100);
    PERFORM jobq.enqueue('nr_other', '{}', now() + interval '1 second');
END $$;
SELECT is(jobq.next_run_at(ARRAY['nr', 'nr2']), now() + interval '2 minutes', 'the earliest across several queues');
SELECT is(jobq.next_run_at(ARRAY['nr2', 'nr']), now() + interval '2 minutes', 'queue order does not matter');
SELECT is(jobq.next_run_at(ARRAY['nr']), now() + interval '5 minutes', 'queues not listed are ignored');
SELECT is(jobq.next_run_at(ARRAY['nr', 'nobody']), now() + interval '5 minutes', 'an unknown queue in the list is harmless');

-- many distinct priorities: the loose index scan must visit them all
DO $$ BEGIN
    PERFORM jobq.enqueue('prio', '{}', now() + (g * interval '1 minute') + interval '1 hour', g) FROM generate_series(-50, 50) AS g;
    PERFORM jobq.enqueue('prio', '{}', now() + interval '42 seconds', 17);
    PERFORM jobq.enqueue('prio', '{}', now() - interval '1 hour', -100);
END $$;
SELECT is(jobq.next_run_at(ARRAY['prio']), now() + interval '42 seconds',
          'the earliest run_at hidden at one of 100 priorities is found');
SELECT is(jobq.next_run_at(ARRAY['aaa', 'prio', 'zzz', 'nr']), now() + interval '42 seconds',
          'and across queues sorting before and after it');

-- running jobs are not waited for; a backing-off job is
DO $$ BEGIN PERFORM jobq.enqueue('bo', '{}'); END $$;
CREATE TEMP TABLE c2 AS SELECT * FROM jobq.claim('bo');
UPDATE jobq._job SET run_at = now() + interval '1 minute' WHERE id = (SELECT id FROM c2);
SELECT is(jobq.next_run_at(ARRAY['bo']), NULL, 'a running job (even with a future run_at) is not waited for');
SELECT ok(jobq.fail((SELECT id FROM c2), 'x', (SELECT lease_token FROM c2), now() + interval '3 minutes'), 'fail with retry_at in 3 minutes');
SELECT is(jobq.next_run_at(ARRAY['bo']), now() + interval '3 minutes', 'a job waiting for its retry is waited for');

-- claimed / finished jobs no longer count
UPDATE jobq._job SET run_at = now() WHERE queue = 'nr2';
SELECT is(jobq.next_run_at(ARRAY['nr', 'nr2']), now() + interval '5 minutes', 'a job that became ready no longer counts');
SELECT ok(jobq.cancel((SELECT id FROM jobq._job WHERE queue = 'nr' AND run_at = now() + interval '5 minutes')), 'cancel the earliest scheduled job');
SELECT is(jobq.next_run_at(ARRAY['nr']), now() + interval '10 minutes', 'a cancelled job no longer counts');

SELECT throws_ok($$SELECT jobq.next_run_at(ARRAY['ok', 'bad name'])$$, 'JQ001',
    'jobq: queues[2] must be a queue name of 1 to 128 characters from [A-Za-z0-9_.:-], got ''bad name''',
    'a bad queue name in the array raises JQ001 naming its position');
SELECT throws_ok($$SELECT jobq.next_run_at(ARRAY['ok', NULL])$$, 'JQ001', NULL,
    'a NULL queue name in the array raises JQ001');

SELECT * FROM finish();
ROLLBACK;

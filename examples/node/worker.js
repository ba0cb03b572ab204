// A jobq worker in JavaScript with node-postgres: LISTEN for wake-ups, claim jobs in batches, run a
// handler per job, then complete or fail each job with its lease token.
//   DATABASE_URL=postgresql://user@host/db node worker.js [queue ...]      (default queue: "default")
import pg from 'pg';

const queues = process.argv.length > 2 ? process.argv.slice(2) : ['default'];
const setting = (name, fallback) => Number(process.env[name] ?? fallback);
const BATCH = setting('JOBQ_BATCH', 10); // jobs per claim
const POLL_MS = setting('JOBQ_POLL_SECONDS', 5) * 1000; // the safety net when no NOTIFY comes
const HEARTBEAT_MS = setting('JOBQ_HEARTBEAT_SECONDS', 60) * 1000; // extends a long job's lease
const LEASE = process.env.JOBQ_LEASE ?? null; // e.g. '2 minutes'; null: the queue's lease
const name = `node-${process.pid}`;
const log = (message) => console.log(`${new Date().toISOString()} ${name} ${message}`);

// The work: replace with your async function. Throw to fail the job (jobq retries it with backoff).
// This one obeys its payload: {"sleep_ms": 500} takes that long, {"fail_once": true} fails its first attempt.
async function handle(job) {
  if (job.payload.sleep_ms) await new Promise((resolve) => setTimeout(resolve, job.payload.sleep_ms));
  if (job.payload.fail_once && job.attempts === 1) throw new Error('failing the first attempt, as asked');
}

const db = new pg.Client({ connectionString: process.env.DATABASE_URL, application_name: name });
const one = async (sql, params) => (await db.query(sql, params)).rows[0];
let stopping = false; // SIGTERM/SIGINT: finish the job in hand, hand back the rest, exit
let notified = false; // a NOTIFY for our queues came since the last claim
let wake = () => {};

// A lost lease (it expired; jobq gave the job back to the queue or to another worker) makes
// complete, fail and heartbeat return false and change nothing: say so and carry on.
const lost = (job, what) => log(`lease lost on job ${job.id} (${what} returned false); moving on`);

async function run(job) {
  const beat = setInterval(async () => {
    const { ok } = await one('SELECT jobq.heartbeat($1, $2) AS ok', [job.id, job.lease_token]);
    if (!ok) lost(job, 'heartbeat');
  }, HEARTBEAT_MS);
  const error = await handle(job).then(() => null, (err) => (err instanceof Error ? err : new Error(err)));
  clearInterval(beat);
  if (error === null) {
    const { ok } = await one('SELECT jobq.complete($1, $2) AS ok', [job.id, job.lease_token]);
    if (ok) log(`completed job ${job.id}`); else lost(job, 'complete');
  } else { // jobq keeps the text as the job's last_error and retries the job after a backoff
    const { ok } = await one('SELECT jobq.fail($1, $2, $3) AS ok', [job.id, error.stack, job.lease_token]);
    if (ok) log(`failed job ${job.id} (attempt ${job.attempts}): ${error.message}`); else lost(job, 'fail');
  }
}

// Sleep until a NOTIFY for one of our queues, a stop, or the poll interval, whichever comes first.
function nap(ms) {
  if (notified || stopping) return Promise.resolve(stopping ? 'stop' : 'notify');
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms, 'poll');
    wake = (why) => { clearTimeout(timer); resolve(why); };
  });
}

db.on('notification', ({ payload }) => { // jobq's NOTIFY payload is the queue's name
  if (queues.includes(payload)) { notified = true; wake('notify'); }
});
const stop = (signal) => { log(`${signal}: stopping after the job in hand`); stopping = true; wake('stop'); };
process.on('SIGTERM', stop).on('SIGINT', stop);

await db.connect();
await db.query('LISTEN jobq');
log(`listening on channel jobq for queues ${queues.join(', ')}`);
let idle = false;
while (!stopping) {
  notified = false;
  // A JS array arrives as an array literal ('{a,b}'): jobq claims across those queues.
  const claimed = await db.query('SELECT * FROM jobq.claim($1, $2, $3, $4)', [queues, BATCH, name, LEASE]);
  const jobs = claimed.rows;
  for (const [i, job] of jobs.entries()) {
    if (stopping) { // never started: give them back without spending an attempt
      for (const rest of jobs.slice(i)) await one('SELECT jobq.release($1, $2)', [rest.id, rest.lease_token]);
      log(`released ${jobs.length - i} unstarted jobs`);
      break;
    }
    await run(job);
  }
  if (jobs.length > 0) { idle = false; continue; }
  if (!idle) log(`idle: waiting for NOTIFY, polling every ${POLL_MS / 1000} s`);
  idle = true;
  const why = await nap(POLL_MS);
  if (why === 'notify') log('woken by NOTIFY');
  if (why === 'poll') await db.query('SELECT jobq.reap()'); // expired leases back to the queue (as pg_cron)
}
await db.end();
log('stopped');

// A jobq worker in JavaScript with postgres.js: LISTEN for wake-ups, claim jobs in batches, run a
// handler per job, then complete or fail each job with its lease token.
//   DATABASE_URL=postgresql://user@host/db node worker.js [queue ...]      (default queue: "default")
// postgres.js types each parameter from the statement PostgreSQL prepared; where that cannot tell it
// what a JS value is (an array for claim's queues), the query says it: ${queues}::text[].
import postgres from 'postgres';

const queues = process.argv.length > 2 ? process.argv.slice(2) : ['default'];
const setting = (name, fallback) => Number(process.env[name] ?? fallback);
const BATCH = setting('JOBQ_BATCH', 10); // jobs per claim
const POLL_MS = setting('JOBQ_POLL_SECONDS', 5) * 1000; // the safety net when no NOTIFY comes
const name = `postgresjs-${process.pid}`;
const log = (message) => console.log(`${new Date().toISOString()} ${name} ${message}`);

// The work: replace with your async function. Throw to fail the job (jobq retries it with backoff).
// This one obeys its payload: {"steps": 3} works in 3 steps and heart-beats after each one (a long job
// keeps its lease), {"fail_once": true} fails its first attempt.
async function handle(job, beat) {
  for (let step = 0; step < (job.payload.steps ?? 0); step++) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    await beat();
  }
  if (job.payload.fail_once && job.attempts === 1) throw new Error('failing the first attempt, as asked');
}

const sql = postgres(process.env.DATABASE_URL, { max: 1, connection: { application_name: name } });
let stopping = false; // SIGTERM/SIGINT: finish the job in hand, hand back the rest, exit
let notified = false; // a NOTIFY for our queues came since the last claim
let wake = () => {};
const lost = (job, what) => log(`lease lost on job ${job.id} (${what} returned false); moving on`);

async function run(job) {
  const beat = async () => { // extends the lease; false when it was lost
    const [{ ok }] = await sql`SELECT jobq.heartbeat(${job.id}, ${job.lease_token}) AS ok`;
    if (ok) log(`heartbeat on job ${job.id}`); else lost(job, 'heartbeat');
  };
  const error = await handle(job, beat).then(() => null, (err) => (err instanceof Error ? err : new Error(err)));
  if (error === null) {
    const [{ ok }] = await sql`SELECT jobq.complete(${job.id}, ${job.lease_token}) AS ok`;
    if (ok) log(`completed job ${job.id}`); else lost(job, 'complete');
  } else { // jobq keeps the text as the job's last_error and retries the job after a backoff
    const [{ ok }] = await sql`SELECT jobq.fail(${job.id}, ${error.stack}, ${job.lease_token}) AS ok`;
    if (ok) log(`failed job ${job.id} (attempt ${job.attempts}): ${error.message}`); else lost(job, 'fail');
  }
}

// Sleep until a NOTIFY for one of our queues, a stop, or ms, whichever comes first.
function nap(ms) {
  if (notified || stopping) return Promise.resolve(stopping ? 'stop' : 'notify');
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms, 'poll');
    wake = (why) => { clearTimeout(timer); resolve(why); };
  });
}

const stop = (signal) => { log(`${signal}: stopping after the job in hand`); stopping = true; wake('stop'); };
process.on('SIGTERM', stop).on('SIGINT', stop);
// jobq's NOTIFY payload is the queue's name. postgres.js listens on a connection of its own.
await sql.listen('jobq', (queue) => { if (queues.includes(queue)) { notified = true; wake('notify'); } });
log(`listening on channel jobq for queues ${queues.join(', ')}`);
let idle = false;
while (!stopping) {
  notified = false;
  const jobs = await sql`SELECT * FROM jobq.claim(${queues}::text[], ${BATCH}, ${name})`;
  for (const [i, job] of jobs.entries()) {
    if (stopping) { // never started: give them back without spending an attempt
      for (const rest of jobs.slice(i)) await sql`SELECT jobq.release(${rest.id}, ${rest.lease_token})`;
      log(`released ${jobs.length - i} unstarted jobs`);
      break;
    }
    await run(job);
  }
  if (jobs.length > 0) { idle = false; continue; }
  // Nothing ready: sleep until a NOTIFY, the next scheduled job (a retry in backoff), or the poll.
  const [{ due }] = await sql`SELECT extract(epoch FROM jobq.next_run_at(${queues}::text[]) - now()) * 1000 AS due`;
  if (!idle) log(`idle: waiting for NOTIFY, polling every ${POLL_MS / 1000} s`);
  idle = true;
  const why = await nap(due === null ? POLL_MS : Math.min(POLL_MS, Math.max(Number(due), 0)));
  if (why === 'poll') await sql`SELECT jobq.reap()`; // expired leases back to the queue (as pg_cron does)
}
await sql.end();
log('stopped');

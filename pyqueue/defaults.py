"""Module-level defaults of the pyqueue workers, each with its unit."""

from __future__ import annotations

BATCH_SIZE = 10  # jobs claimed per round trip
CONCURRENCY = 4  # handler threads (or tasks) per Worker
POLL_INTERVAL = 5.0  # seconds an idle worker waits when no NOTIFY arrives
# seconds: the longest an idle worker waits between polls once empty claims
# have stretched its interval (doubling from POLL_INTERVAL, with jitter)
MAX_POLL_INTERVAL = 30.0
# seconds a woken idle worker waits before claiming unless it is its queues'
# first responder: one job must not set every idle worker claiming at once
FOLLOWER_DELAY = 0.05
# seconds: after a claim on a NOTIFY that found nothing, a worker claims on
# NOTIFYs again at most this long after it (those in between are coalesced
# into that claim): a role that can only connect may NOTIFY without limit
NOTIFY_WINDOW = 0.05
# seconds: an in-transaction batch that comes back full and took at least this
# long (slow handlers) starts one more batch in parallel; quicker ones run one
# after the other (parallel holders would only skip each other's locked rows)
TX_PARALLEL_AFTER = 0.1
REAP_INTERVAL = 30.0  # seconds between a worker's opportunistic jobq.reap() calls
# seconds a stopping worker lets running handlers finish before it fails them
SHUTDOWN_TIMEOUT = 30.0
SCHEDULES_CHECK_MAX = 60.0  # seconds between jobq.run_schedules() calls at most (new schedules)
SCHEDULES_CHECK_MIN = 1.0  # seconds between jobq.run_schedules() calls at least
REAP_BATCH = 10000  # jobs one jobq.reap() call may return to the queue
PRUNE_INTERVAL = 300.0  # seconds between a reaping worker's jobq.prune() calls (where pg_cron does not prune)
PRUNE_BATCH = 10000  # finished jobs one jobq.prune() call of a worker may delete
HEARTBEAT_FRACTION = 1 / 3  # of a job's lease: heartbeat a held job this often
RECONNECT_DELAY_MIN = 0.5  # seconds before the first reconnection attempt
RECONNECT_DELAY_MAX = 30.0  # seconds: cap of the exponential reconnection backoff
CONNECT_TIMEOUT = 10  # seconds libpq may spend opening one connection
STOP_CHECK_INTERVAL = 0.5  # seconds between checks of a caller-supplied stop event
ACK_FLUSH_INTERVAL = 1.0  # seconds a finished job may wait to be acknowledged in a batch
MAX_ERROR_CHARS = 10000  # characters of an error text jobq.fail() keeps

CHANNEL = "jobq"  # the NOTIFY channel; the payload is a queue name
CANCEL_CHANNEL = "jobq_cancel"  # cancelled running jobs: 'id:lease_token' pairs, space-separated
# seconds: a worker's job sends its latest reported progress at most this
# often (or with its heartbeat, if that comes first): reports in between coalesce
PROGRESS_INTERVAL = 1.0
LISTEN_APPLICATION_NAME = "pyqueue-listen"  # application_name of a worker's LISTEN connection
WORKER_APPLICATION_NAME = "pyqueue-worker"  # ... of its claim / acknowledge connections
HEARTBEAT_APPLICATION_NAME = "pyqueue-heartbeat"  # ... of its heartbeat connection

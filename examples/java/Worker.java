// A jobq worker in Java with JDBC (pgJDBC): LISTEN for wake-ups, claim jobs in batches, run a handler
// per job, then complete or fail each job with its lease token.
//   DATABASE_URL=jdbc:postgresql://host:5432/db?user=app java -cp postgresql.jar Worker.java [queue ...]
// pgJDBC sends each parameter with the type of its setter: setLong for an id and for n,
// setObject(UUID) for a lease token, setArray for claim's queues, setString for text. A jsonb or
// interval argument given with setString needs ?::jsonb / ?::interval in the query (or
// stringtype=unspecified in the URL): see docs/sql.md, "Typed drivers".
import java.sql.Array;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

public class Worker {
    static final String NAME = "java-" + ProcessHandle.current().pid();
    static final int BATCH = Integer.parseInt(System.getenv().getOrDefault("JOBQ_BATCH", "10")); // jobs per claim
    static final double POLL = Double.parseDouble(System.getenv().getOrDefault("JOBQ_POLL_SECONDS", "5")); // s
    static volatile boolean stopping = false; // SIGTERM/SIGINT: finish the job in hand, hand back the rest, exit

    record Job(long id, UUID leaseToken, int attempts, String payload, int steps, boolean failOnce) {}

    static void log(String message) {
        System.out.println(Instant.now() + " " + NAME + " " + message);
    }

    // The work: replace with yours; throw to fail the job (jobq retries it after a backoff). This one
    // obeys its payload (read by the claim query; parse job.payload() with your JSON library):
    // {"steps": 3} works in 3 steps and heart-beats after each one (a long job keeps its lease),
    // {"fail_once": true} fails its first attempt.
    static void handle(Job job, Runnable beat) throws Exception {
        for (int step = 0; step < job.steps(); step++) {
            Thread.sleep(200);
            beat.run();
        }
        if (job.failOnce() && job.attempts() == 1) throw new Exception("failing the first attempt, as asked");
    }

    static boolean call(Connection db, String sql, Object... params) throws SQLException {
        try (PreparedStatement statement = db.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                if (params[i] instanceof Long id) statement.setLong(i + 1, id);
                else statement.setObject(i + 1, params[i]); // a UUID goes as uuid, a String as varchar
            }
            try (ResultSet rows = statement.executeQuery()) {
                rows.next();
                return rows.getBoolean(1);
            }
        }
    }

    static void lost(Job job, String what) {
        log("lease lost on job " + job.id() + " (" + what + " returned false); moving on");
    }

    static void run(Connection db, Job job) throws SQLException {
        Runnable beat = () -> { // extends the lease; false when it was lost
            try {
                if (call(db, "SELECT jobq.heartbeat(?, ?)", job.id(), job.leaseToken())) {
                    log("heartbeat on job " + job.id());
                } else {
                    lost(job, "heartbeat");
                }
            } catch (SQLException e) {
                throw new RuntimeException(e);
            }
        };
        try {
            handle(job, beat);
        } catch (Exception error) { // jobq keeps the text as the job's last_error and retries after a backoff
            if (call(db, "SELECT jobq.fail(?, ?, ?)", job.id(), error.toString(), job.leaseToken())) {
                log("failed job " + job.id() + " (attempt " + job.attempts() + "): " + error.getMessage());
            } else {
                lost(job, "fail");
            }
            return;
        }
        if (call(db, "SELECT jobq.complete(?, ?)", job.id(), job.leaseToken())) {
            log("completed job " + job.id());
        } else {
            lost(job, "complete");
        }
    }

    static List<Job> claim(Connection db, Array queues) throws SQLException {
        String sql = "SELECT id, lease_token, attempts, payload::text AS payload,"
                + " coalesce((payload->>'steps')::int, 0) AS steps,"
                + " coalesce((payload->>'fail_once')::boolean, false) AS fail_once"
                + " FROM jobq.claim(?, ?, ?)";
        List<Job> jobs = new ArrayList<>();
        try (PreparedStatement statement = db.prepareStatement(sql)) {
            statement.setArray(1, queues); // text[]
            statement.setLong(2, BATCH); // n is a bigint (jobq 0.11): setLong or setInt
            statement.setString(3, NAME);
            try (ResultSet rows = statement.executeQuery()) {
                while (rows.next()) {
                    jobs.add(new Job(rows.getLong("id"), rows.getObject("lease_token", UUID.class),
                            rows.getInt("attempts"), rows.getString("payload"), rows.getInt("steps"),
                            rows.getBoolean("fail_once")));
                }
            }
        }
        return jobs;
    }

    /** Seconds until the next scheduled job of these queues (a retry in backoff), or POLL when none. */
    static double untilNext(Connection db, Array queues) throws SQLException {
        try (PreparedStatement statement = db.prepareStatement(
                "SELECT extract(epoch FROM jobq.next_run_at(?) - now())::float8")) {
            statement.setArray(1, queues);
            try (ResultSet rows = statement.executeQuery()) {
                rows.next();
                double due = rows.getDouble(1);
                return rows.wasNull() ? POLL : Math.max(0, Math.min(POLL, due));
            }
        }
    }

    public static void main(String[] args) throws Exception {
        List<String> names = args.length > 0 ? Arrays.asList(args) : List.of("default");
        // SIGTERM/SIGINT start the JVM's shutdown: let this loop finish the job in hand and release the
        // rest, then exit 0 (the JVM's own exit status after a signal is 128 + its number).
        Thread loop = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            log("stopping after the job in hand");
            stopping = true;
            try {
                loop.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            Runtime.getRuntime().halt(0);
        }));
        try (Connection db = DriverManager.getConnection(System.getenv("DATABASE_URL"))) {
            db.setAutoCommit(true);
            db.createStatement().execute("SET application_name = '" + NAME + "'");
            db.createStatement().execute("LISTEN jobq");
            PGConnection listener = db.unwrap(PGConnection.class);
            Array queues = db.createArrayOf("text", names.toArray());
            log("listening on channel jobq for queues " + String.join(", ", names));
            boolean idle = false;
            while (!stopping) {
                List<Job> jobs = claim(db, queues);
                for (int i = 0; i < jobs.size(); i++) {
                    if (stopping) { // never started: give them back without spending an attempt
                        for (Job rest : jobs.subList(i, jobs.size())) {
                            call(db, "SELECT jobq.release(?, ?)", rest.id(), rest.leaseToken());
                        }
                        log("released " + (jobs.size() - i) + " unstarted jobs");
                        break;
                    }
                    run(db, jobs.get(i));
                }
                if (!jobs.isEmpty()) {
                    idle = false;
                    continue;
                }
                // Nothing ready: sleep until a NOTIFY, the next scheduled job (a retry in backoff), or the poll.
                double wait = untilNext(db, queues);
                if (!idle) log("idle: waiting for NOTIFY, polling every " + POLL + " s");
                idle = true;
                PGNotification[] notes = listener.getNotifications(Math.max(1, (int) (wait * 1000)));
                boolean woken = notes != null && Arrays.stream(notes).anyMatch(n -> names.contains(n.getParameter()));
                if (!woken && !stopping) db.createStatement().execute("SELECT jobq.reap()"); // as pg_cron does
            }
        }
        log("stopped");
    }
}

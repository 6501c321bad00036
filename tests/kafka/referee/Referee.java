/*
 * Kafka 4.1's own log cleaner run over partition directories, one cleaning round each: the referee the
 * property tests hold kcompact's clean against (tests/kafka/referee/harness.py compiles and runs it).
 *
 * Usage: java Referee [--threads N]   (a server: one job a line on stdin, one result a line on stdout, until
 * stdin ends; with N threads, N jobs at a time and results in the order they finish)
 *
 * A job is tab-separated: the partition directory, now in ms, the dedupe buffer in bytes (0: large enough
 * for every key), then topic config pairs KEY=VALUE (Kafka's names). One JVM serves every job of a test
 * session, one after the other. A result is tab-separated:
 *   CLEANED  dir  firstDirtyOffset  firstUncleanableOffset  endOffset
 *   NOTHING  dir  firstDirtyOffset  firstUncleanableOffset            (no cleanable bytes: no round)
 *   ERROR    dir  exception class and message                        (its stack trace on stderr)
 * Kafka's own logging goes to stderr: stdout carries results only.
 *
 * A round is what a broker's cleaner thread does for the partition it picked (LogCleaner.CleanerThread
 * cleanLog), with the inputs kcompact reads from the same log dir:
 * - the log is opened as a broker's LogManager opens it (UnifiedLog.create) with the log start offset of
 *   log-start-offset-checkpoint, no recovery of segments, producer state from the newest snapshot plus
 *   the log after it (the whole log when there is none);
 * - the high watermark is the replication-offset-checkpoint entry, or the log end offset without one;
 * - producers idle for producer.id.expiration.ms are expired at now, as the broker's periodic
 *   PeriodicProducerExpirationCheck would have done (UnifiedLog.removeExpiredProducers);
 * - the range is LogCleanerManager.cleanableOffsets over the cleaner-offset-checkpoint entry, a reset
 *   checkpoint written as grabFilthiestCompactedLog writes it; the min.cleanable.dirty.ratio is not
 *   applied (kcompact clean cleans what is cleanable);
 * - Cleaner.doClean at now, with a SkimpyOffsetMap (MD5) of the dedupe buffer and the broker's default
 *   I/O buffer; then LogCleanerManager.doneCleaning writes the checkpoint, and UnifiedLog.deleteOldSegments
 *   runs as the cleaner thread runs it after a round. Deletions the log schedules run before it is closed.
 *   Each thread keeps its Cleaner from round to round, as a broker's LogCleaner.CleanerThread does (the
 *   offset map cleared by every round's buildOffsetMap), one per dedupe buffer size and now; with N threads
 *   the I/O buffer is split as LogCleaner.CleanerThread splits it (ioBufferSize / numThreads / 2), the
 *   dedupe buffer being the job's own; the checkpoint updates of the threads are serialized, as the one
 *   LogCleanerManager's lock serializes a broker's.
 * - before the round, UnifiedLog.deleteOldSegments as an earlier, idle iteration of the cleaner thread ran
 *   it: segments wholly below the log start are gone before a round (kcompact's order, see its round's
 *   docstring; within one cleanFilthiestLog iteration Kafka cleans first, then deletes).
 */

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.util.Scheduler;
import org.apache.kafka.storage.internals.checkpoint.OffsetCheckpointFile;
import org.apache.kafka.storage.internals.log.Cleaner;
import org.apache.kafka.storage.internals.log.CleanerStats;
import org.apache.kafka.storage.internals.log.LogCleanerManager;
import org.apache.kafka.storage.internals.log.LogCleaningState;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.LogToClean;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.SkimpyOffsetMap;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.internals.utils.Throttler;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Delayed;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

public final class Referee {
    // Kafka 4.1's broker defaults (CleanerConfig, ServerLogConfigs, TransactionLogConfig)
    private static final int IO_BUFFER_SIZE = 512 * 1024;        // log.cleaner.io.buffer.size
    private static final double LOAD_FACTOR = 0.9;               // log.cleaner.io.buffer.load.factor
    private static final int MAX_MESSAGE_BYTES = 1024 * 1024 + 12; // message.max.bytes
    private static final int UNBOUNDED_MAP_BYTES = 64 * 1024 * 1024;
    private static final int CHECK_INTERVAL_MS = 600_000;        // producer.id.expiration.check.interval.ms
    // a broker's one LogCleanerManager lock: the threads' writes of cleaner-offset-checkpoint one at a time
    private static final Object CHECKPOINTS = new Object();
    // each thread's Cleaner, reused while the dedupe buffer size and now stay (LogCleaner.CleanerThread's one)
    private static final ThreadLocal<ThreadCleaner> CLEANERS = new ThreadLocal<>();
    private static int threads = 1;

    /** A thread's Cleaner with what it was built for. */
    private record ThreadCleaner(int mapBytes, long nowMs, Cleaner cleaner) {
    }

    private Referee() {
    }

    /** A clock that stands still at the round's now, as both cleaners are given one. */
    private static final class FixedTime implements Time {
        private final long nowMs;

        FixedTime(long nowMs) {
            this.nowMs = nowMs;
        }

        @Override
        public long milliseconds() {
            return nowMs;
        }

        @Override
        public long nanoseconds() {
            return TimeUnit.MILLISECONDS.toNanos(nowMs);
        }

        @Override
        public void sleep(long ms) {
        }

        @Override
        public void waitObject(Object obj, java.util.function.Supplier<Boolean> condition, long deadlineMs) {
            throw new UnsupportedOperationException("the referee never waits");
        }
    }

    /** Holds one-shot tasks (segment deletions) until {@link #runPending}; periodic ones never run. */
    private static final class HeldScheduler implements Scheduler {
        private final List<Runnable> once = new ArrayList<>();

        @Override
        public void startup() {
        }

        @Override
        public void shutdown() {
        }

        @Override
        public synchronized ScheduledFuture<?> schedule(String name, Runnable task, long delayMs, long periodMs) {
            if (periodMs < 0) {
                once.add(task);
            }
            return new InertFuture();
        }

        @Override
        public void resizeThreadPool(int newSize) {
        }

        synchronized void runPending() {
            while (!once.isEmpty()) {
                once.remove(0).run();
            }
        }
    }

    private static final class InertFuture implements ScheduledFuture<Object> {
        @Override
        public long getDelay(TimeUnit unit) {
            return 0;
        }

        @Override
        public int compareTo(Delayed other) {
            return 0;
        }

        @Override
        public boolean cancel(boolean mayInterrupt) {
            return true;
        }

        @Override
        public boolean isCancelled() {
            return false;
        }

        @Override
        public boolean isDone() {
            return true;
        }

        @Override
        public Object get() {
            return null;
        }

        @Override
        public Object get(long timeout, TimeUnit unit) {
            return null;
        }
    }

    public static void main(String[] args) throws Exception {
        // the protocol's channel, taken before any Kafka class sets up logging on System.out
        PrintStream results = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        if (args.length == 2 && args[0].equals("--threads")) {
            threads = Integer.parseInt(args[1]);
        } else if (args.length != 0) {
            throw new IllegalArgumentException("usage: java Referee [--threads N]");
        }
        BufferedReader jobs = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        if (threads == 1) {
            for (String line = jobs.readLine(); line != null; line = jobs.readLine()) {
                if (!line.isBlank()) {
                    results.println(runJob(line));
                }
            }
            return;
        }
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        for (String line = jobs.readLine(); line != null; line = jobs.readLine()) {
            if (!line.isBlank()) {
                String job = line;
                pool.execute(() -> {
                    String result = runJob(job);
                    synchronized (results) {
                        results.println(result);
                    }
                });
            }
        }
        pool.shutdown();
        pool.awaitTermination(Long.MAX_VALUE, TimeUnit.DAYS);
    }

    private static String runJob(String line) {
        String[] fields = line.split("\t");
        String dir = fields[0];
        try {
            Properties props = new Properties();
            for (int i = 3; i < fields.length; i++) {
                int eq = fields[i].indexOf('=');
                props.put(fields[i].substring(0, eq), fields[i].substring(eq + 1));
            }
            return cleanOne(new File(dir), Long.parseLong(fields[1]), Integer.parseInt(fields[2]), props);
        } catch (Throwable err) {
            StringWriter trace = new StringWriter();
            err.printStackTrace(new PrintWriter(trace));
            System.err.println("referee: " + dir + "\n" + trace);
            return "ERROR\t" + dir + "\t" + String.valueOf(err).replace('\n', ' ').replace('\t', ' ');
        }
    }

    private static Optional<Long> checkpointEntry(File logDir, String name, TopicPartition tp) throws Exception {
        File file = new File(logDir, name);
        if (!file.exists()) {
            return Optional.empty();
        }
        return Optional.ofNullable(new OffsetCheckpointFile(file, new LogDirFailureChannel(1)).read().get(tp));
    }

    private static String cleanOne(File dir, long nowMs, int dedupeBytes, Properties props) throws Exception {
        File logDir = dir.getAbsoluteFile().getParentFile();
        TopicPartition tp = UnifiedLog.parseTopicPartitionName(dir);
        LogConfig config = new LogConfig(props);
        Time time = new FixedTime(nowMs);
        HeldScheduler scheduler = new HeldScheduler();
        LogDirFailureChannel failures = new LogDirFailureChannel(1);
        int expirationMs = Integer.parseInt(props.getProperty("producer.id.expiration.ms", "86400000"));
        int maxTxnTimeoutMs = Integer.parseInt(props.getProperty("transaction.max.timeout.ms", "900000"));

        long logStart = checkpointEntry(logDir, "log-start-offset-checkpoint", tp).orElse(0L);
        // lastShutdownClean=false with the recovery point at the end: no segment is recovered, and
        // producer state is replayed from the log where no snapshot covers it (UnifiedLog.rebuildProducerState)
        UnifiedLog log = UnifiedLog.create(dir, config, logStart, Long.MAX_VALUE, scheduler, new BrokerTopicStats(),
                time, maxTxnTimeoutMs, new ProducerStateManagerConfig(expirationMs, false), CHECK_INTERVAL_MS,
                failures, false, Optional.empty());
        try {
            log.updateHighWatermark(checkpointEntry(logDir, "replication-offset-checkpoint", tp).orElse(log.logEndOffset()));
            log.removeExpiredProducers(nowMs);

            // an idle iteration of the cleaner thread came first (cleanFilthiestLog with no log dirty enough,
            // then deleteOldSegments): the segments wholly below the log start are gone before the round
            log.deleteOldSegments();
            scheduler.runPending();
            ConcurrentHashMap<TopicPartition, UnifiedLog> logs = new ConcurrentHashMap<>(Map.of(tp, log));
            LogCleanerManager manager = new LogCleanerManager(List.of(logDir), logs, failures);
            try {
                Optional<Long> lastClean = checkpointEntry(logDir, LogCleanerManager.OFFSET_CHECKPOINT_FILE, tp);
                LogCleanerManager.OffsetsToClean range = LogCleanerManager.cleanableOffsets(log, lastClean, nowMs);
                if (range.forceUpdateCheckpoint()) {
                    synchronized (CHECKPOINTS) {
                        manager.updateCheckpoints(logDir, Optional.of(Map.entry(tp, range.firstDirtyOffset())),
                                Optional.empty());
                    }
                }
                LogToClean cleanable = new LogToClean(log, range.firstDirtyOffset(), range.firstUncleanableDirtyOffset(), false);
                String offsets = range.firstDirtyOffset() + "\t" + range.firstUncleanableDirtyOffset();
                if (cleanable.cleanableBytes() <= 0) {
                    return "NOTHING\t" + dir + "\t" + offsets;
                }
                manager.setCleaningState(tp, LogCleaningState.LOG_CLEANING_IN_PROGRESS);
                Map.Entry<Long, CleanerStats> done = threadCleaner(dedupeBytes, nowMs).doClean(cleanable, nowMs);
                synchronized (CHECKPOINTS) {
                    manager.doneCleaning(tp, logDir, done.getKey());
                }
                // then, as LogCleaner.CleanerThread.cleanFilthiestLog does for every compacted log: the
                // segments wholly below the log start go (and, with cleanup.policy=delete, retention)
                log.deleteOldSegments();
                scheduler.runPending();
                return "CLEANED\t" + dir + "\t" + offsets + "\t" + done.getKey();
            } finally {
                manager.removeMetrics(); // one JVM serves many rounds: no gauges left behind
            }
        } finally {
            scheduler.runPending();
            log.close();
        }
    }

    /** This thread's Cleaner for the dedupe buffer and now, built when either changes. */
    private static Cleaner threadCleaner(int dedupeBytes, long nowMs) throws Exception {
        int mapBytes = dedupeBytes > 0 ? dedupeBytes : UNBOUNDED_MAP_BYTES;
        ThreadCleaner held = CLEANERS.get();
        if (held == null || held.mapBytes() != mapBytes || held.nowMs() != nowMs) {
            Time time = new FixedTime(nowMs);
            Cleaner cleaner = new Cleaner(0, new SkimpyOffsetMap(mapBytes, "MD5"), IO_BUFFER_SIZE / threads / 2,
                    MAX_MESSAGE_BYTES, LOAD_FACTOR,
                    new Throttler(Double.MAX_VALUE, 300, "cleaner-io", "bytes", time), time, p -> { });
            held = new ThreadCleaner(mapBytes, nowMs, cleaner);
            CLEANERS.set(held);
        }
        return held.cleaner();
    }
}

/*
 * Kafka 4.1's log loader on partition directories: the log end a broker serves once it has loaded one
 * after an unclean shutdown. The referee of kcompact's segment/recovery.py and segment/swap_completion.py
 * (tests/kafka/test_loaded_log_end.py compiles and runs it through tests/kafka/referee/harness.py).
 *
 * Usage: java LoadedLogEnd   (one partition directory a line on stdin, one result a line on stdout)
 *
 * The log is opened as a broker's LogManager.loadLog opens it after an unclean shutdown (UnifiedLog.create,
 * lastShutdownClean=false): LogLoader.load settles an interrupted swap's leftovers
 * (removeTempFilesAndCollectSwapFiles, then the swaps completed), then LogLoader.recoverLog recovers every
 * segment from the log dir's recovery-point-offset-checkpoint entry (0 without one), with the log start of
 * log-start-offset-checkpoint. The directory is changed as a broker changes it: run it on a copy.
 * A result is tab-separated: the log end offset, the segments' base offsets (comma-separated), then the
 * leader-epoch lineage the loaded log holds (epoch@start, comma-separated: the checkpoint's entries, the
 * epochs LogSegment.recover assigned from the batches it walked, cut to the log), or ERROR and the exception.
 */

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.checkpoint.OffsetCheckpointFile;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Optional;
import java.util.Properties;
import java.util.stream.Collectors;

public final class LoadedLogEnd {
    private static final int CHECK_INTERVAL_MS = 600_000;  // producer.id.expiration.check.interval.ms

    private LoadedLogEnd() {
    }

    public static void main(String[] args) throws Exception {
        // Kafka's logging goes to stderr: stdout carries results only
        PrintStream results = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        KafkaScheduler scheduler = new KafkaScheduler(1, true, "loaded-log-end-");
        scheduler.startup();
        BufferedReader jobs = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line = jobs.readLine(); line != null; line = jobs.readLine()) {
                String reply;
                try {
                    reply = load(new File(line), scheduler);
                } catch (Exception e) {
                    reply = "ERROR\t" + String.valueOf(e).replace('\n', ' ').replace('\t', ' ');
                }
                results.println(reply);
            }
        } finally {
            scheduler.shutdown();
        }
    }

    private static String load(File dir, KafkaScheduler scheduler) throws Exception {
        File logDir = dir.getAbsoluteFile().getParentFile();
        TopicPartition tp = UnifiedLog.parseTopicPartitionName(dir);
        long logStart = checkpointEntry(logDir, "log-start-offset-checkpoint", tp).orElse(0L);
        long recoveryPoint = checkpointEntry(logDir, "recovery-point-offset-checkpoint", tp).orElse(0L);
        UnifiedLog log = UnifiedLog.create(dir, new LogConfig(new Properties()), logStart, recoveryPoint, scheduler,
                new BrokerTopicStats(), Time.SYSTEM, 900_000, new ProducerStateManagerConfig(86_400_000, false),
                CHECK_INTERVAL_MS, new LogDirFailureChannel(1), false, Optional.empty());
        try {
            String bases = log.logSegments().stream().map(s -> String.valueOf(s.baseOffset()))
                .collect(Collectors.joining(","));
            String epochs = log.leaderEpochCache().epochEntries().stream().map(e -> e.epoch + "@" + e.startOffset)
                .collect(Collectors.joining(","));
            return log.logEndOffset() + "\t" + bases + "\t" + epochs;
        } finally {
            log.close();
        }
    }

    private static Optional<Long> checkpointEntry(File logDir, String name, TopicPartition tp) throws Exception {
        File file = new File(logDir, name);
        if (!file.exists()) {
            return Optional.empty();
        }
        return Optional.ofNullable(new OffsetCheckpointFile(file, new LogDirFailureChannel(1)).read().get(tp));
    }
}

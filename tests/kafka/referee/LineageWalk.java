/*
 * Kafka 4.1's LeaderEpochFileCache walking a follower's truncation against a leader: the referee of
 * kcompact's segment/lineage.py (tests/kafka/test_lineage_walk.py compiles and runs it through
 * tests/kafka/referee/harness.py).
 *
 * Usage: java LineageWalk   (one job a line on stdin, one result a line on stdout, until stdin ends)
 *
 * A job is tab-separated: the follower's leader-epoch-checkpoint, its log start, its log end, then the
 * leader's checkpoint, log start and log end. Each checkpoint is copied into a temporary directory first
 * (the cache writes its file on assign). A result is tab-separated: the offset the follower is truncated
 * to, then the follower's and the leader's lineages as Kafka's cache holds them once loaded (epoch@start,
 * comma-separated), or ERROR and the exception.
 *
 * What is Kafka's own: reading the checkpoint (LeaderEpochCheckpointFile, each entry assigned in order by
 * the LeaderEpochFileCache constructor), cutting the lineage to the log as LogLoader.load cuts it
 * (truncateFromEndAsyncFlush(log end), then truncateFromStartAsyncFlush(log start)), the leader's new
 * epoch at its log end (assign, as Partition.makeLeader's UnifiedLog.assignEpochStartOffset), every answer
 * (endOffsetFor, on the leader for its reply and on the follower as UnifiedLog.endOffsetForEpoch) and every
 * cut of the follower's lineage (truncateFromEndAsyncFlush). The follower's decision between two answers is
 * AbstractFetcherThread.getOffsetTruncationState's (a private method of a fetcher thread; restated here
 * line for line), and the leader's "no diverging epoch" is Partition.fetchRecords' test.
 */

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile;
import org.apache.kafka.storage.internals.epoch.LeaderEpochFileCache;
import org.apache.kafka.storage.internals.log.EpochEntry;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.stream.Collectors;

public final class LineageWalk {
    private static final long UNDEFINED_EPOCH_OFFSET = -1L;  // EpochEndOffset.UNDEFINED_EPOCH_OFFSET
    private static final TopicPartition TP = new TopicPartition("walk", 0);

    private LineageWalk() {
    }

    public static void main(String[] args) throws Exception {
        // Kafka's logging goes to stderr: stdout carries results only
        PrintStream results = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        KafkaScheduler scheduler = new KafkaScheduler(1, true, "lineage-walk-");
        scheduler.startup();
        BufferedReader jobs = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line = jobs.readLine(); line != null; line = jobs.readLine()) {
                String[] f = line.split("\t");
                String reply;
                try {
                    LeaderEpochFileCache follower = loaded(f[0], Long.parseLong(f[1]), Long.parseLong(f[2]), scheduler);
                    LeaderEpochFileCache leader = loaded(f[3], Long.parseLong(f[4]), Long.parseLong(f[5]), scheduler);
                    String lineages = entries(follower) + "\t" + entries(leader);
                    long cut = truncationOffset(follower, Long.parseLong(f[2]), leader, Long.parseLong(f[5]));
                    reply = cut + "\t" + lineages;
                } catch (Exception e) {
                    reply = "ERROR\t" + e.getClass().getName() + ": " + e.getMessage();
                }
                results.println(reply);
            }
        } finally {
            scheduler.shutdown();
        }
    }

    /** The cache a broker holds once LogLoader.load has loaded the log. */
    private static LeaderEpochFileCache loaded(String checkpoint, long logStart, long logEnd, KafkaScheduler scheduler)
            throws Exception {
        Path dir = Files.createTempDirectory("lineage-walk");
        File copy = dir.resolve("walk-0").toFile();
        Files.createDirectories(copy.toPath());
        File file = new File(copy, "leader-epoch-checkpoint");
        Files.copy(Path.of(checkpoint), file.toPath(), StandardCopyOption.REPLACE_EXISTING);
        LeaderEpochFileCache cache = new LeaderEpochFileCache(TP,
            new LeaderEpochCheckpointFile(file, new LogDirFailureChannel(1)), scheduler);
        cache.truncateFromEndAsyncFlush(logEnd);
        cache.truncateFromStartAsyncFlush(logStart);
        return cache;
    }

    private static long truncationOffset(LeaderEpochFileCache follower, long followerEnd,
                                         LeaderEpochFileCache leader, long leaderEnd) {
        int newEpoch = Math.max(follower.latestEpoch().orElse(-1), leader.latestEpoch().orElse(-1)) + 1;
        leader.assign(newEpoch, leaderEnd);  // Partition.makeLeader: UnifiedLog.assignEpochStartOffset
        long end = followerEnd;
        while (follower.latestEpoch().isPresent()) {
            int epoch = follower.latestEpoch().get();
            Map.Entry<Integer, Long> answer = leader.endOffsetFor(epoch, leaderEnd);
            if (answer.getKey() == epoch && answer.getValue() >= end) {
                break;  // Partition.fetchRecords: neither a lower epoch nor an end below the fetch offset
            }
            Map.Entry<Integer, Long> own = follower.endOffsetFor(answer.getKey(), end);  // UnifiedLog.endOffsetForEpoch
            if (own.getValue() == UNDEFINED_EPOCH_OFFSET) {
                return Math.min(answer.getValue(), end);
            }
            if (!own.getKey().equals(answer.getKey())) {  // an epoch the follower never had: cut, ask again
                end = Math.min(own.getValue(), end);
                follower.truncateFromEndAsyncFlush(end);
                continue;
            }
            return Math.min(Math.min(own.getValue(), answer.getValue()), end);
        }
        return Math.min(end, leaderEnd);  // a fetch past the leader's end: AbstractFetcherThread.fetchOffsetAndTruncate
    }

    private static String entries(LeaderEpochFileCache cache) {
        return cache.epochEntries().stream().map(e -> e.epoch + "@" + e.startOffset).collect(Collectors.joining(","));
    }
}

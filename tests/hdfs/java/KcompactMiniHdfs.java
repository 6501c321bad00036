// A NameNode and a DataNode in this JVM (Hadoop's MiniDFSCluster), on 127.0.0.1, for kcompact's tests.
//
// Usage: java -cp <tests/hdfs/pom.xml's jars> KcompactMiniHdfs.java BASE_DIR
// Prints two lines once the DataNode serves blocks: `hdfs=hdfs://127.0.0.1:PORT` (the NameNode's RPC) and
// `webhdfs=webhdfs://127.0.0.1:PORT` (its HTTP server, WebHDFS); then runs until it is signalled (TERM: the
// cluster shuts down). Permissions are off: the tests write as whatever user they run as.

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public class KcompactMiniHdfs {
    public static void main(String[] args) throws Exception {
        Configuration conf = new Configuration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, args[0]);
        conf.setBoolean("dfs.permissions.enabled", false);
        conf.setBoolean("dfs.webhdfs.enabled", true);
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf).numDataNodes(1).build();
        cluster.waitActive();
        System.out.println("hdfs=hdfs://127.0.0.1:" + cluster.getNameNodePort());
        System.out.println("webhdfs=webhdfs://127.0.0.1:" + cluster.getNameNode().getHttpAddress().getPort());
        System.out.flush();
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
        Thread.sleep(Long.MAX_VALUE);
    }
}

"""A real HDFS on 127.0.0.1 for the tests: Hadoop's MiniDFSCluster from Maven Central (``cluster.py``)."""

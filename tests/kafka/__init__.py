"""Apache Kafka 4.1 itself in the test suite: its jars (``jars``), brokers started and stopped on 127.0.0.1,
its clients, and its own log cleaner as a referee."""

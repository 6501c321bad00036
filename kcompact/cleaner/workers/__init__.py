"""Running a round's passes and a log dir's partitions in worker processes.

Fork (``parallel``), the partition pool (``pool``) and temporary-file results (``spill``); no Kafka
rule lives here, and the bytes written do not depend on the number of workers.
"""

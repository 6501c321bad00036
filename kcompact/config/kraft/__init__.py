"""The KRaft metadata log (``__cluster_metadata-0``): its records and their replay.

``record_types`` (the values), ``records`` (decoding them) and ``metadata_state`` (replaying a
snapshot and the log into topics and dynamic configs, as ``MetadataImage`` does).
"""

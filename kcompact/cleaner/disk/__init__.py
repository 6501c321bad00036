"""The only cleaner code that renames or deletes segment files.

``swap`` (Kafka's ``UnifiedLog.replaceSegments`` and the loader's recovery of interrupted swaps),
``roll`` (``UnifiedLog.roll``) and ``retention`` (``UnifiedLog.deleteOldSegments``).
"""

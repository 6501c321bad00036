"""The partition's log as the cleaner loads it: segments, producer state, transactions.

One pass over batch headers (``log_state.load_log_state``); read-only.
"""

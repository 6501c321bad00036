"""kcompact.records."""

"""kcompact.cleaner."""

"""kcompact.config."""

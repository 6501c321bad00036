"""kcompact.repair."""

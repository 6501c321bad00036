"""kcompact.spark."""

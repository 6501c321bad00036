"""kcompact.segment."""

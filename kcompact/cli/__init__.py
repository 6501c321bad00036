"""kcompact.cli."""

"""kcompact.inspect."""

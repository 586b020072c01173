"""Index: a repository read, chunked, and kept in step in Chroma and the BM25 corpus."""

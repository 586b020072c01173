"""Retrieve: the query built from an error; vectors, BM25, frames and symbols fused per file."""

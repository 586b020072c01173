"""Model clients (embedder, reranker, chat) and the lease that keeps one model per host."""

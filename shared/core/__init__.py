"""Every process's core: domain types, settings, errors, Redis keys, queues, the chain's wiring."""

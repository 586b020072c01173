"""Keep pytest out of the fixture service: its own tests are data to index, not project tests."""

collect_ignore = ["sample-service"]

"""Small helpers shared across the service."""

"""Persistence of orders."""

"""Outgoing customer notifications."""

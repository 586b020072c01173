"""Notify: the Slack message, its destinations and the delivery policy."""

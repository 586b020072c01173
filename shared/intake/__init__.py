"""Intake: raw input to one ErrorEvent, then redaction, fingerprint and group count."""

"""Error groups: what intake counts and every later stage reads.

submit.py hands events over (redact, fingerprint, count, start the chain once); store.py keeps
each group's count, window and state; triage.py its mutes and resolutions; incidents.py the
outages that gather groups; deferred.py the groups waiting for an analysis slot.
"""

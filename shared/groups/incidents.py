"""Incidents: new groups that share a root cause within a short window, told as one.

When the database goes away, every endpoint fails with its own stack — 300 groups, each
worth an analysis on a host that does one every few seconds — and underneath each the same
``OperationalError: could not connect to server``. The innermost exception's type and
normalized message (``cause_of``) is the incident's key: the first new group with a cause
opens an incident; a new group with the same cause inside ``incident_window`` (which slides
with every new member) joins it. Every member waits in the deferred backlog
(shared/groups/deferred.py): the first for ``settle_s`` only, so that the incident's most
frequent group — known once the counts have come in — is analysed first, the rest later in
order of count while the host is free, their messages threaded under the incident's.
Independently, at most ``max_new_groups`` new analyses start per service and
``new_groups_window``, and at most ``max_new_groups_total`` for every service together (so
naming new services buys no more); the groups over either wait in the same backlog, and those
alone in their incident join the service's cap batch: an incident of kind ``cap`` whose
message is a summary, posted while they wait (shared/notify/incident.py). Every group is
counted as before; a waiting group is analysed unless the backlog drops it (its TTL and size
bound, shared/groups/deferred.py).

Keys (``{id}`` a sequence number):
  th:incident:cause:{digest}  the open incident of a cause (expires with the window)
  th:incident:cap:{digest}    the open cap batch of a service (expires with the cap window)
  th:incident:{id}            hash: cause (a cap batch: the service), kind (cause, cap),
                              opened_at, lead, lead_started (when it was started: the
                              other groups wait for its message), poster, poster_at,
                              msg_channel, msg_ts, msg_target; a cap batch: cap,
                              cap_window_s
  th:incident:{id}:groups     sorted set: member fingerprints by when they joined
  th:incident:{id}:labels     hash: fingerprint -> "service · exception at file" (the list)
  th:newgroups:{service}      new analyses started in the service's current cap window
  th:newgroups:all            new analyses started for every service in the window
A group's hash (shared/groups/store.py) names its incident in ``incident``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from shared.core import keys
from shared.core.domain import ErrorEvent
from shared.intake.fingerprint import normalize_message
from shared.intake.trace import trace_of

IDLE_EXPIRY_S = 7 * 24 * 3600
INCIDENT_UPDATE_S = 15.0  # an incident's list is rewritten at most this often
SUMMARY_DUE_S = 1.0  # a new cap batch's summary is posted this soon
_WORD = re.compile(r"(?<![<\w])[A-Za-z]{3,}(?![>\w])")  # a word that is not a placeholder


def cause_of(event: ErrorEvent) -> str | None:
    """``Type: normalized message`` of the event's innermost exception, or None when it says
    too little to join unrelated stacks on (no type, or a message of placeholders only:
    ``KeyError: <str>`` in two services is two bugs, not one outage)."""
    found = trace_of(event).root_cause()
    if found is not None:
        kind, message = found.type, found.message
    elif event.exception_type:
        kind, message = event.exception_type, event.message
    else:
        return None
    normalized = normalize_message(message)
    if not _WORD.search(normalized):
        return None
    return f"{kind}: {normalized}"[:300]


_ADMIT = """
-- One new group: join or open its cause's incident, then apply the service's cap.
-- KEYS: cause key (unused when ARGV[2] == '0'), cap counter, group, incident sequence,
--       the service's cap batch, the counter of every service
-- ARGV: fp, has_cause, cause, incident_window_ms, cap_window_s, max_new, label, expiry_s,
--       service, settle ('1': a lead waits for its incident's counts), max_new for all
-- Returns "run:<incident>" or "defer:<incident>:<incident|cap|settle>" (incident "" when
-- none), and ":new" after "cap" when the group opened its service's cap batch.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fp, expiry = ARGV[1], tonumber(ARGV[8])
local function join(incident)
  local ikey = 'th:incident:' .. incident
  redis.call('ZADD', ikey .. ':groups', 'NX', now, fp)
  redis.call('HSET', ikey .. ':labels', fp, ARGV[7])
  redis.call('HSET', ikey, 'last_at', now)
  for _, k in ipairs({ikey, ikey .. ':groups', ikey .. ':labels'}) do
    redis.call('EXPIRE', k, expiry)
  end
  redis.call('HSET', KEYS[3], 'incident', incident)
end
local incident = ''
local lead = true
if ARGV[2] == '1' then
  local open = redis.call('GET', KEYS[1])
  if open then
    incident = open
    lead = redis.call('HGET', 'th:incident:' .. incident, 'lead') == fp
  else
    incident = tostring(redis.call('INCR', KEYS[4]))
    redis.call('HSET', 'th:incident:' .. incident, 'cause', ARGV[3], 'kind', 'cause',
               'opened_at', now, 'lead', fp)
  end
  redis.call('SET', KEYS[1], incident, 'PX', ARGV[4])
  join(incident)
else
  redis.call('HDEL', KEYS[3], 'incident')  -- an older window's incident is not this one's
end
if not lead then
  return 'defer:' .. incident .. ':incident'
end
local n = redis.call('INCR', KEYS[2])
if n == 1 then
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
local all = redis.call('INCR', KEYS[6])
if all == 1 then
  redis.call('EXPIRE', KEYS[6], ARGV[5])
end
if (tonumber(ARGV[6]) > 0 and n > tonumber(ARGV[6]))
    or (tonumber(ARGV[11]) > 0 and all > tonumber(ARGV[11])) then
  -- Over the cap and alone (no incident, or one it just opened): one summary per service and
  -- cap window lists it; later members of its incident still join that incident.
  if incident == '' or redis.call('ZCARD', 'th:incident:' .. incident .. ':groups') == 1 then
    incident = redis.call('GET', KEYS[5])
    local opened = ''
    if not incident then
      opened = ':new'
      incident = tostring(redis.call('INCR', KEYS[4]))
      redis.call('HSET', 'th:incident:' .. incident, 'cause', ARGV[9], 'kind', 'cap',
                 'opened_at', now, 'cap', ARGV[6], 'cap_window_s', ARGV[5])
      local ttl = redis.call('TTL', KEYS[2])
      redis.call('SET', KEYS[5], incident, 'EX', ttl > 0 and ttl or ARGV[5])
    end
    join(incident)
    return 'defer:' .. incident .. ':cap' .. opened
  end
  return 'defer:' .. incident .. ':cap'
end
if ARGV[10] == '1' and incident ~= '' then
  return 'defer:' .. incident .. ':settle'
end
if incident ~= '' then  -- its lead runs now: its other groups wait for its message
  redis.call('HSET', 'th:incident:' .. incident, 'lead_started', now)
end
return 'run:' .. incident
"""


@dataclass(frozen=True)
class NewGroup:
    """A group that opened a window, as admission sees it."""

    fingerprint: str
    service: str
    cause: str | None
    label: str


@dataclass(frozen=True)
class Admission:
    fingerprint: str
    run_now: bool
    incident: str | None
    # why it waits: "incident" (a later member), "cap", or "settle" (an incident's first
    # group, until its groups' counts show which one to analyse first)
    reason: str | None = None
    opened_batch: bool = False  # it opened its service's cap batch (its summary is due)


@dataclass(frozen=True)
class AdmissionPolicy:
    incident_window_s: float
    max_new_groups: int  # per service and cap window; 0: no cap
    new_groups_window_s: float
    settle_s: float = 0.0  # an incident's first analysis waits this long for the counts
    max_new_groups_total: int = 0  # every service together, per cap window; 0: no cap


class Admitter:
    """Decides, for each new group, whether its analysis starts now or waits in the backlog."""

    def __init__(self, r: redis.Redis, policy: AdmissionPolicy) -> None:
        self.r, self.policy = r, policy
        self._admit = r.register_script(_ADMIT)

    def admit(self, groups: Sequence[NewGroup]) -> list[Admission]:
        """One round trip for all of them; in order (a later member of an incident opened
        earlier in the same batch joins it)."""
        if not groups:
            return []
        p = self.policy
        pipe = self.r.pipeline(transaction=False)
        for g in groups:
            has_cause = g.cause is not None and p.incident_window_s > 0
            self._admit(
                keys=[
                    keys.incident_cause(g.cause or ""),
                    keys.new_groups(g.service),
                    keys.group(g.fingerprint),
                    keys.INCIDENT_SEQ,
                    keys.cap_batch(g.service),
                    keys.NEW_GROUPS_ALL,
                ],
                args=[
                    g.fingerprint,
                    "1" if has_cause else "0",
                    g.cause or "",
                    max(1, int(p.incident_window_s * 1000)),
                    max(1, int(p.new_groups_window_s)),
                    p.max_new_groups,
                    g.label,
                    IDLE_EXPIRY_S,
                    g.service,
                    "1" if p.settle_s > 0 else "0",
                    p.max_new_groups_total,
                ],
                client=pipe,
            )
        out = []
        for g, reply in zip(groups, pipe.execute(), strict=True):
            verdict, incident, *why = _s(reply).split(":")
            out.append(
                Admission(
                    g.fingerprint,
                    verdict == "run",
                    incident or None,
                    why[0] if why else None,
                    opened_batch=why[1:] == ["new"],
                )
            )
        return out


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# --- reading an incident -----------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    fingerprint: str
    label: str
    count: int  # events in the group's current window
    waiting: bool = False  # its analysis has not started (it is in the deferred backlog)


@dataclass(frozen=True)
class Incident:
    id: str
    cause: str  # a cap batch: the service
    opened_at: int  # ms
    poster: str | None  # the group whose message is the incident's
    msg_channel: str | None
    msg_ts: str | None
    members: tuple[Member, ...]  # most events first
    kind: str = "cause"  # "cap": the service's groups over its cap of new analyses
    cap: int = 0  # a cap batch's cap and its window
    cap_window_s: int = 0

    @property
    def waiting(self) -> int:
        return sum(m.waiting for m in self.members)

    @property
    def events(self) -> int:
        return sum(m.count for m in self.members)

    @property
    def services(self) -> int:
        return len({m.label.split(" · ", 1)[0] for m in self.members})


def size(r: redis.Redis, incident: str) -> int:
    return int(r.zcard(keys.incident(incident) + ":groups"))


def incident_of(r: redis.Redis, fingerprint: str) -> str | None:
    value = r.hget(keys.group(fingerprint), "incident")
    return _s(value) if value else None


def load(r: redis.Redis, incident: str) -> Incident | None:
    pipe = r.pipeline(transaction=False)
    pipe.hgetall(keys.incident(incident))
    pipe.hgetall(keys.incident(incident) + ":labels")
    raw, labels = pipe.execute()
    if not raw:
        return None
    head = {_s(k): _s(v) for k, v in raw.items()}
    names = {_s(k): _s(v) for k, v in labels.items()}
    fps = sorted(names)
    pipe = r.pipeline(transaction=False)
    for fp in fps:
        pipe.hget(keys.group(fp), "window_count")
        pipe.zscore(keys.DEFERRED, fp)
    found = pipe.execute()
    members = sorted(
        (
            Member(fp, names[fp], int(found[2 * i] or 0), found[2 * i + 1] is not None)
            for i, fp in enumerate(fps)
        ),
        key=lambda m: (-m.count, m.label),
    )
    return Incident(
        id=incident,
        cause=head.get("cause", ""),
        opened_at=int(head.get("opened_at", 0)),
        poster=head.get("poster") or None,
        msg_channel=head.get("msg_channel") or None,
        msg_ts=head.get("msg_ts") or None,
        members=tuple(members),
        kind=head.get("kind") or "cause",
        cap=int(head.get("cap") or 0),
        cap_window_s=int(head.get("cap_window_s") or 0),
    )


# --- the incident's one message ----------------------------------------------------------------


@dataclass(frozen=True)
class Post:
    """This group's message is the incident's: post it at the top level."""


@dataclass(frozen=True)
class Reply:
    """Post in the incident message's thread (when aimed at its ``target``; ``ts`` is
    ``NO_THREAD`` when the message has no thread)."""

    channel: str | None
    ts: str
    target: str


@dataclass(frozen=True)
class Wait:
    """Another member is posting the incident's message: come back shortly."""


_CLAIM_POSTER = """
-- KEYS: incident ; ARGV: fp, now_ms, stale_ms, expiry_s. The member that posts its message.
redis.call('EXPIRE', KEYS[1], ARGV[4])
local poster = redis.call('HGET', KEYS[1], 'poster')
if (not poster) or poster == ARGV[1] then
  redis.call('HSET', KEYS[1], 'poster', ARGV[1], 'poster_at', ARGV[2])
  return {'post'}
end
local ts = redis.call('HGET', KEYS[1], 'msg_ts')
if ts and ts ~= '' then
  return {'reply', redis.call('HGET', KEYS[1], 'msg_channel') or '', ts,
          redis.call('HGET', KEYS[1], 'msg_target') or ''}
end
local at = tonumber(redis.call('HGET', KEYS[1], 'poster_at')) or 0
if tonumber(ARGV[2]) - at > tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'poster', ARGV[1], 'poster_at', ARGV[2])
  return {'post'}
end
return {'wait'}
"""


def place(
    r: redis.Redis, incident: str, fingerprint: str, *, now_ms: int, stale_s: float
) -> Post | Reply | Wait:
    """Where a member's analysis goes: the incident's message (the first member to deliver),
    a reply under it, or wait while another member posts it (taken over once that claim is
    ``stale_s`` old: its run died)."""
    script = r.register_script(_CLAIM_POSTER)
    reply = script(
        keys=[keys.incident(incident)],
        args=[fingerprint, now_ms, int(stale_s * 1000), IDLE_EXPIRY_S],
    )
    kind = _s(reply[0])
    if kind == "post":
        return Post()
    if kind == "reply":
        return Reply(_s(reply[1]) or None, _s(reply[2]), _s(reply[3]))
    return Wait()


NO_THREAD = "-"  # the incident's message has no thread (a webhook, the console)


def posted(r: redis.Redis, incident: str, channel: str | None, ts: str | None, target: str) -> None:
    """The incident's message is out: members reply in its thread when they go to the same
    ``target`` (the routed channel both were aimed at), else post on their own."""
    pipe = r.pipeline(transaction=True)
    pipe.hset(
        keys.incident(incident),
        mapping={"msg_channel": channel or "", "msg_ts": ts or NO_THREAD, "msg_target": target},
    )
    pipe.expire(keys.incident(incident), IDLE_EXPIRY_S)
    pipe.execute()


def claim_update(r: redis.Redis, incident: str, interval_s: float) -> bool:
    """At most one pending rewrite of the incident's list per interval (SET NX)."""
    key = keys.incident(incident) + ":update"
    return bool(r.set(key, "1", nx=True, px=max(1, int(interval_s * 1000))))

"""Slack channel names resolved to IDs, kept in Redis so each worker learns a name once.

Every Slack method but ``chat.postMessage`` takes only a channel ID; a channel configured by
name is resolved with ``conversations.list`` or learnt from the ID a post answers with
(shared/notify/notifiers.py). Kept here, a bot without ``channels:read`` still finds its
lost posts in a worker that never posted itself.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

import redis

from shared.core import keys


class ChannelIds(MutableMapping[str, str]):
    """name -> ID in one Redis hash (``keys.SLACK_CHANNEL_IDS``)."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def __getitem__(self, name: str) -> str:
        value = self.r.hget(keys.SLACK_CHANNEL_IDS, name)
        if value is None:
            raise KeyError(name)
        return value.decode() if isinstance(value, bytes) else str(value)

    def __setitem__(self, name: str, channel_id: str) -> None:
        self.r.hset(keys.SLACK_CHANNEL_IDS, name, channel_id)

    def __delitem__(self, name: str) -> None:
        if not self.r.hdel(keys.SLACK_CHANNEL_IDS, name):
            raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        names = self.r.hkeys(keys.SLACK_CHANNEL_IDS)
        return iter(n.decode() if isinstance(n, bytes) else str(n) for n in names)

    def __len__(self) -> int:
        return int(self.r.hlen(keys.SLACK_CHANNEL_IDS))

"""brokerLiveTable: what is known of each registered broker process, and which connection it came over."""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from namesrv.channel import Channel
from namesrv.routeinfo.model import BrokerLiveInfo, LiveKey


class LiveTable:
    """(clusterName, brokerAddr) -> BrokerLiveInfo, indexed by connection (a closed connection takes
    out the brokers whose current registration came over it). `by_key` is read directly; every
    write goes through `set`/`drop`/`replace`, which keep the index."""

    __slots__ = ("by_key", "_by_channel")

    def __init__(self) -> None:
        self.by_key: dict[LiveKey, BrokerLiveInfo] = {}
        self._by_channel: dict[Channel, set[LiveKey]] = {}

    def __len__(self) -> int:
        return len(self.by_key)

    def __iter__(self) -> Iterator[LiveKey]:
        return iter(self.by_key)

    def items(self):  # noqa: ANN201 - dict's own view
        return self.by_key.items()

    def set(self, key: LiveKey, live: BrokerLiveInfo) -> None:
        held = self.by_key.get(key)
        if held is not None and held.channel is live.channel:  # a registration over the same connection
            self.by_key[key] = live
            return
        self.drop(key)
        self.by_key[key] = live
        if live.channel is not None:
            self._by_channel.setdefault(live.channel, set()).add(key)

    def set_channel(self, key: LiveKey, live: BrokerLiveInfo, channel: Channel | None) -> None:
        """`live` (the entry at `key`) now came over `channel`."""
        if live.channel is not None:
            keys = self._by_channel[live.channel]
            keys.discard(key)
            if not keys:
                del self._by_channel[live.channel]
        live.channel = channel
        if channel is not None:
            self._by_channel.setdefault(channel, set()).add(key)

    def drop(self, key: LiveKey) -> BrokerLiveInfo | None:
        live = self.by_key.pop(key, None)
        if live is not None and live.channel is not None:
            keys = self._by_channel[live.channel]
            keys.discard(key)
            if not keys:
                del self._by_channel[live.channel]
        return live

    def replace(self, table: Mapping[LiveKey, BrokerLiveInfo]) -> None:
        self.by_key.clear()
        self._by_channel.clear()
        for key, live in table.items():
            self.set(key, live)

    def keys_of(self, channel: Channel) -> list[LiveKey]:
        """The brokers registered over `channel`."""
        return list(self._by_channel.get(channel, ()))

    def channels(self) -> list[Channel]:
        return list(self._by_channel)

    def by_channel(self) -> dict[Channel, set[LiveKey]]:
        """The index (a copy), for consistency checks."""
        return {channel: set(keys) for channel, keys in self._by_channel.items()}

    def expired(self, now: int) -> list[tuple[LiveKey, int]]:
        """Brokers silent past their timeout at `now`, each with the refresh time it was found at."""
        return [(key, live.last_update_timestamp) for key, live in self.by_key.items() if live.expired(now)]

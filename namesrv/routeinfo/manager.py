"""The route table (RocketMQ's RouteInfoManager): sans-IO, thread-safe, RocketMQ 5.x semantics.

RocketMQ's five tables plus the 5.x static-topic mapping table, under one readers-writer lock.
The two large ones are objects of their own (namesrv.routeinfo.tables): brokers' liveness
(`LiveTable`) and topics' queue entries (`QueueTable`), which reports every change it makes to
`RouteChanges`, the one place that counts changes, drops cached routes (`RouteBodyCache`) and
records them for the route-change push. This class holds the lock and runs RocketMQ's steps.

Callers decode request bodies *before* calling in, so the write lock is never held for a JSON
parse; and a periodic re-registration identical to the broker's previous one is recognised by a
fingerprint of its body (`refresh_registration`), so the body need not be decoded at all.

Unregistration is synchronous (RocketMQ 4.9.8 style, no batch queue), and the expiry scan and
channel-close path re-check their condition under the write lock, so a broker that re-registered
in the meantime is never wiped (RocketMQ 5.x issue #11043).

When a group's lowest broker id changes and notifyMinBrokerIdChanged is on, the change is reported
as plain data (`MinBrokerIdChange`) to `min_broker_id_listener`; sending it is not this module's
business (namesrv.broker_notifier). The warm-restart snapshot's format is namesrv.routeinfo.persist's.
"""
from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol.codes import PERM_READ, PERM_WRITE, FLAG_UNIT, FLAG_UNIT_SUB
from namesrv.protocol.route import (
    MASTER_ID,
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    QueueData,
    RegisterBrokerResult,
    TopicList,
    TopicRouteData,
)
from namesrv.protocol.topic import DataVersion, QueueFields, TopicConfigSerializeWrapper, TopicQueueTable
from namesrv.routeinfo.cache import DEFAULT_MAX_BYTES, RouteBodyCache
from namesrv.routeinfo import history as events
from namesrv.routeinfo.model import (
    DEFAULT_BROKER_CHANNEL_EXPIRED_TIME,
    BrokerLiveInfo,
    LiveKey,
    MinBrokerIdChange,
    Registrant,
    RemovedBroker,
    RouteTables,
    now_ms,
)
from namesrv.routeinfo.rwlock import ReadWriteLock
from namesrv.routeinfo.tables import LiveTable, QueueTable, RouteChanges
from namesrv.routeinfo.zones import zone_key, zone_route

log = logging.getLogger(__name__)

#: The result of a registration that learns no master (a master's, or a slave's whose master is away).
_NO_MASTER = RegisterBrokerResult()
#: Topics a broker group uses to sync its members; never rewritten for acting masters (4.7 step 5).
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"


class StaleTopicEntries(Exception):
    """A table decoded against the broker's previous topic entries (`decode_registration`'s
    `previous`) came after the route table changed them: decode the body in full and register again."""


class RouteTableFull(Exception):
    """A registration would pass maxBrokers or maxQueueDatas: refused before it changes anything."""


def _no_history(*cause: Any, **named: Any) -> None:
    """`RouteInfoManager._cause` while no history watches."""


class RouteInfoManager:
    """Brokers, their topics and liveness; answers every route and topic-list query."""

    def __init__(self, config: NamesrvConfig, clock: Callable[[], int] = now_ms,
                 route_cache_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._config = config
        self._clock = clock
        self._lock = ReadWriteLock()
        self._changes = RouteChanges(RouteBodyCache(route_cache_bytes))
        # The RocketMQ tables.
        self._queues = QueueTable(self._changes)
        self._brokers: dict[str, BrokerData] = {}
        self._clusters: dict[str, set[str]] = {}
        self._live = LiveTable()
        self._filters: dict[LiveKey, list[str]] = {}
        self._mappings: dict[str, dict[str, Any]] = {}
        #: Brokers taken out, by cause ("unregistered", "expired", "channel closed"), since start.
        self.removals: dict[str, int] = {}
        #: Registrations since start: "applied" (a topic table read) or "unchanged" (a liveness refresh).
        self.registrations = {"applied": 0, "unchanged": 0}
        #: Told of each change of a group's lowest broker id while notifyMinBrokerIdChanged is on (None:
        #: nobody sends them). Called under the write lock: it must only queue, never block or raise.
        self.min_broker_id_listener: Callable[[MinBrokerIdChange], None] | None = None
        #: Told the cause and topics of every route change (`watch_routes`), under the write lock.
        self.route_events: events.RouteHistory | None = None
        #: A write that may change routes starts (`RouteHistory.cause`'s arguments): the history's own
        #: method once one watches, called without a step between.
        self._cause: Callable[..., None] = _no_history

    @property
    def config(self) -> NamesrvConfig:
        return self._config

    def watch_routes(self, history: events.RouteHistory) -> None:
        """From now on, tell `history` what causes each route change and which topics it changed."""
        history.bind(self._queues.by_topic, self._clock)
        self.route_events = history
        self._cause = history.cause
        self._changes.listener = history.changed

    @property
    def route_changes(self) -> int:
        """Grows with every change of a topic's route (namesrv.routeinfo.persist saves the tables when it moved)."""
        return self._changes.count

    @property
    def changes_ready(self) -> threading.Event:
        """Set whenever a tracked route change is recorded (the route-change publisher waits on it)."""
        return self._changes.ready

    # ------------------------------------------------------------------ registration

    def register(self, registrant: Registrant, table: TopicConfigSerializeWrapper | TopicQueueTable,
                 filter_servers: list[str] | None, channel: Channel | None,
                 fingerprint: Hashable | None = None) -> RegisterBrokerResult | None:
        """RocketMQ 5.x registerBroker (reference 4.2, steps 1-13).

        `table` is the broker's topic table: the server passes a TopicQueueTable (only the queue
        fields of each topic, decoded without TopicConfig objects); a TopicConfigSerializeWrapper
        is read the same way. `filter_servers` None leaves the broker's as they are. Returns None
        when the single-topic guard refuses the registration (the caller answers "register broker
        failed"); an empty result when a newer broker holds this id. `fingerprint` identifies the
        undecoded body (anything hashable that changes whenever the decoded table and filter list
        could): given, the next identical registration can take `refresh`.
        """
        with self._lock.write:
            return self._register_locked(registrant, table, filter_servers, channel,
                                         None if fingerprint is None else (registrant, fingerprint))

    def refresh(self, registrant: Registrant, fingerprint: Hashable,
                channel: Channel | None) -> RegisterBrokerResult | None:
        """The periodic re-registration of an unchanged broker, without decoding its body.

        Applies only when `register` would change nothing but liveness and the channel: the same
        registrant and body fingerprint as this broker's last registration, its group still as that
        registration left it, and (for a member that applies topics) none of the group's queue
        entries changed since, so no topic is missing that the body would restore. Returns that
        registration's result, or None: then decode the body and call `register`.

        Tried first without the lock, as a seqlock reader: the checks read the tables (or, when no
        writer has run since they last passed for this registrant and fingerprint, are known to
        pass: `BrokerLiveInfo.refreshed`), liveness is stored as a heartbeat stores it
        (`update_broker_timestamp`: that store commutes with any writer), and the answer stands
        when the lock's `epoch` is the same even value after as before, so no writer changed what
        the checks read. That check and the count are made under the lock's mutex, which no writer
        can take meanwhile. A failed check (or no live entry) answers None at once, whatever a writer
        did meanwhile: the registration that follows reads the tables again under the lock. A writer
        that ran meanwhile, one holding the lock, or a moved channel send the same steps under the
        write lock. An equal channel is the same connection (a worker process gets each from the
        write log as a new object): nothing to move.
        """
        if self._config.delete_topic_with_broker_registration:  # a registration then lists every topic
            return None
        lock = self._lock
        epoch = lock.epoch
        key = (registrant.cluster_name, registrant.broker_addr)
        live = self._live.by_key.get(key)
        if live is None:
            return None
        if not epoch & 1 and (live.channel is channel or live.channel == channel):
            memo = live.refreshed
            if memo is not None and memo[0] == epoch and memo[1] is registrant and memo[2] is fingerprint:
                result = memo[3]
            else:
                result = self._refreshable(live, registrant, fingerprint)
            if result is None:
                return None
            live.last_update_timestamp = self._clock()
            lock.mutex.acquire()  # not `with`: see namesrv.routeinfo.rwlock
            try:
                if lock.epoch == epoch:
                    live.refreshed = (epoch, registrant, fingerprint, result)
                    self.registrations["unchanged"] += 1
                    return result
            finally:
                lock.mutex.release()
        with lock.write:
            live = self._live.by_key.get(key)
            result = None if live is None else self._refreshable(live, registrant, fingerprint)
            if result is None:
                return None
            live.last_update_timestamp = self._clock()
            if live.channel is not channel and live.channel != channel:
                self._live.set_channel(key, live, channel)
            live.refreshed = (lock.epoch + 1, registrant, fingerprint, result)  # the epoch once this write ends
            self.registrations["unchanged"] += 1
            return result

    def _refreshable(self, live: BrokerLiveInfo, registrant: Registrant,
                     fingerprint: Hashable) -> RegisterBrokerResult | None:
        """`refresh`'s checks of the broker's live entry `live` (reads only): the answer of its last
        registration, or None when it must be registered again."""
        if live.registration != (registrant, fingerprint):
            return None
        broker_name, broker_id = registrant.broker_name, registrant.broker_id
        group = self._brokers.get(broker_name)
        if not self._group_as_registered(group, registrant):
            return None
        acting = registrant.enable_acting_master
        applies_topics = broker_id == MASTER_ID or (acting is not None and broker_id == min(group.broker_addrs))
        if applies_topics and not (live.topics_applied
                                   and live.queue_changes_seen == self._queues.changes_of(broker_name)):
            return None
        return _NO_MASTER if broker_id == MASTER_ID else self._master_of_locked(group, registrant.cluster_name,
                                                                                  broker_id)

    def registration_hints(self, registrant: Registrant) -> tuple[Hashable | None, bytes | None]:
        """Hints for a new registration of `registrant`, read without the lock (`refresh` and
        `register` check what they lean on again under it): (the body fingerprint of this broker's
        last registration, if it gave one: is `refresh` worth trying?; the topic entries of this
        master's last registration when the route table still holds exactly them: the
        `decode_registration` `previous` to read its body against). One lookup for both: a body
        that is not the last one is read against the entries."""
        live = self._live.by_key.get((registrant.cluster_name, registrant.broker_addr))
        if live is None:
            return None, None
        registration, entries = live.registration, live.topic_entries
        return (None if registration is None else registration[1],
                entries if self._holds_entries_locked(live, registrant, entries) else None)

    def _register_locked(self, registrant: Registrant, wrapper: TopicConfigSerializeWrapper | TopicQueueTable,
                         filter_server_list: list[str] | None, channel: Channel | None,
                         registration: tuple[Registrant, Hashable] | None) -> RegisterBrokerResult | None:
        cluster_name, broker_addr, broker_name = registrant.cluster_name, registrant.broker_addr, registrant.broker_name
        broker_id = registrant.broker_id
        group = self._brokers.get(broker_name)
        key = (cluster_name, broker_addr)
        previous = self._live.by_key.get(key)
        topics = wrapper.queue_fields()
        decoded = wrapper if isinstance(wrapper, TopicQueueTable) else None  # only a decoded table has entries
        omitted = 0 if decoded is None else decoded.omitted
        if omitted and not self._holds_entries_locked(previous, registrant, decoded.omitted_since):
            raise StaleTopicEntries(f"{broker_name}[{broker_id}] {broker_addr}: the route table changed since "
                                    f"the entries {omitted} topics were left out against")
        # Step 7, checked first: an incremental single-topic registration must follow a full one
        # (issue #4522). Checking before any change means a refusal leaves no trace behind.
        if (group is None or broker_id not in group.broker_addrs) and len(topics) + omitted == 1:
            log.warning("refused single-topic registration of %s[%d] %s before its full registration: %s",
                        broker_name, broker_id, broker_addr, list(topics))
            return None
        self._check_room_locked(key, broker_name, topics)
        now = self._clock()  # the registration's time: the live entry's and its event's
        if omitted and self._renews_only_locked(previous, registrant, group, decoded, key, filter_server_list,
                                                channel):
            # Steps 1-9, 12 and 13 would leave every table as it is: step 10 puts the entries that
            # changed, as it would, and step 11 is the live entry renewed. After the room check (its
            # refusal comes first either way). `_cause` only notes a cause for the changes a write
            # reports: a renewal of unchanged entries reports none, and every write that does names
            # its own cause first. (`refreshed` may stay: its epoch is before this write.)
            if topics:
                self._cause(events.REGISTERED, cluster_name, broker_addr, broker_name, broker_id, channel, at_ms=now)
                self._apply_topic_configs(broker_name, topics, len(topics) + omitted, {}, register_first=False,
                                          version_changed=True, wipe_write=False)
                previous.queue_changes_seen = self._queues.changes_of(broker_name)
            previous.last_update_timestamp = now
            previous.data_version = decoded.data_version
            previous.registration = registration
            previous.topic_entries = decoded.entries
            self.registrations["applied"] += 1
            return _NO_MASTER
        self._cause(events.REGISTERED, cluster_name, broker_addr, broker_name, broker_id, channel, at_ms=now)
        enable_acting_master, zone_name = registrant.enable_acting_master, registrant.zone_name
        ha_server_addr, heartbeat_timeout_millis = registrant.ha_server_addr, registrant.heartbeat_timeout_millis
        names = self._clusters.get(cluster_name)  # step 1
        if names is None:
            names = self._clusters[cluster_name] = set()
        names.add(broker_name)
        register_first = group is None  # step 2
        if group is None:
            group = self._brokers[broker_name] = BrokerData(cluster_name, broker_name, {})
        previous_min_id = min(group.broker_addrs, default=None)
        group_changed = False
        old_version_broker = enable_acting_master is None  # step 3
        acting = bool(enable_acting_master)
        if group.enable_acting_master != acting or group.zone_name != zone_name:
            group.enable_acting_master, group.zone_name = acting, zone_name
            group_changed = True
        # Step 5: one address lives under one id only (a slave promoted to master changes id).
        for stale_id in [i for i, addr in group.broker_addrs.items() if addr == broker_addr and i != broker_id]:
            del group.broker_addrs[stale_id]
            group_changed = True
        # Step 6: a different, live address with a newer stateVersion already holds this id.
        old_addr = group.broker_addrs.get(broker_id)
        if old_addr is not None and old_addr != broker_addr:
            old_live = self._live.by_key.get((cluster_name, old_addr))
            if old_live is not None and old_live.data_version.state_version > wrapper.data_version.state_version:
                log.warning("refused registration of %s[%d] %s: %s holds the id with stateVersion %d > %d",
                            broker_name, broker_id, broker_addr, old_addr, old_live.data_version.state_version,
                            wrapper.data_version.state_version)
                self._live.drop((cluster_name, broker_addr))
                self._set_filters((cluster_name, broker_addr), [])
                if group_changed:
                    self._queues.group_changed(broker_name)
                return _NO_MASTER
        group.broker_addrs[broker_id] = broker_addr  # step 8
        if old_addr != broker_addr:
            group_changed = True
        register_first = register_first or not old_addr
        if group_changed:
            self._queues.group_changed(broker_name)

        version_changed = previous is None or previous.data_version != wrapper.data_version
        is_master = broker_id == MASTER_ID  # step 9
        is_prime_slave = not old_version_broker and not is_master and broker_id == min(group.broker_addrs)
        if is_master or is_prime_slave:  # step 10
            self._apply_topic_configs(broker_name, topics, len(topics) + omitted, wrapper.topic_queue_mapping_info_map,
                                      register_first, version_changed,
                                      wipe_write=is_prime_slave and group.enable_acting_master)
        # A master's table applied in full (a new DataVersion) is what the route table now holds.
        entries = decoded.entries if decoded is not None and is_master and (register_first or version_changed) \
            else None
        self._live.set(key, BrokerLiveInfo(  # step 11
            now, DEFAULT_BROKER_CHANNEL_EXPIRED_TIME if heartbeat_timeout_millis is None
            else heartbeat_timeout_millis, wrapper.data_version, channel, ha_server_addr, registration,
            is_master or is_prime_slave, self._queues.changes_of(broker_name), entries))
        if previous is None:
            log.info("new broker registered: %s[%d] %s of cluster %s, HA %s", broker_name, broker_id, broker_addr,
                     cluster_name, ha_server_addr)
        self._set_filters(key, filter_server_list)  # step 12
        self.registrations["applied"] += 1
        if previous_min_id is not None and broker_id < previous_min_id:
            # As 5.x, whatever the group's enableActingMaster: its brokers decide what the news means to them.
            self._min_broker_id_changed(group, None, ha_server_addr)
        return self._master_of_locked(group, cluster_name, broker_id)  # step 13

    def _renews_only_locked(self, live: BrokerLiveInfo, registrant: Registrant, group: BrokerData | None,
                            table: TopicQueueTable, key: LiveKey, filter_servers: list[str] | None,
                            channel: Channel | None) -> bool:
        """Would registering `table`, whose entries were read against `live`'s
        (`_holds_entries_locked`: those left out are unchanged), change nothing but the entries it
        lists (step 10) and `live`'s time, DataVersion, registration, entries and count of its
        group's queue changes? `live` (at `key`) holds a master's registration of the same id (only
        a master's entries are kept), so step 10 puts exactly the entries listed.

        Such a registration (the DataVersion moved, and with it no topic entry or a few: a broker's
        periodic registration, or one whose topic changed) changes no group, yet every other step
        would check and rewrite its table; so those steps are skipped when, and only when, each
        would leave its table alone: the same registrant (step 11's HA address and timeout), its
        group as its registration left it (steps 1-8: no address moves, so no lower broker id
        either), no static-topic mappings (step 10 would store them again and report their routes
        changed), a new DataVersion (with the same one step 11 keeps no entries), the same filter
        servers (step 12) and the same connection object: `LiveTable.set` moves a broker whose
        channel is another object to the end of the live table (the expiry scan's order)."""
        registered = live.registration[0]
        return (not table.topic_queue_mapping_info_map and (registered is registrant or registered == registrant)
                and live.channel is channel and live.data_version != table.data_version
                and self._group_as_registered(group, registrant) and self._filters_hold(key, filter_servers))

    def _group_as_registered(self, group: BrokerData | None, registrant: Registrant) -> bool:
        """Is `group` as a registration of `registrant` leaves it, so that its steps 1-8 would change
        nothing: listed in its cluster, `registrant`'s id at its address, the same acting-master
        and zone flags? (Reads only: also `refresh`'s lock-free checks.)"""
        return (group is not None and group.broker_addrs.get(registrant.broker_id) == registrant.broker_addr
                and registrant.broker_name in self._clusters.get(registrant.cluster_name, ())
                and group.enable_acting_master == bool(registrant.enable_acting_master)
                and group.zone_name == registrant.zone_name)

    def _check_room_locked(self, key: LiveKey, broker_name: str, topics: dict[str, QueueFields]) -> None:
        """RouteTableFull if registering `key` would pass maxBrokers, or its topics maxQueueDatas
        (counted as if it applied them all: a slave's may become its group's table)."""
        config = self._config
        if key not in self._live.by_key and len(self._live) >= config.max_brokers:
            raise RouteTableFull(f"{len(self._live)} brokers are registered, maxBrokers={config.max_brokers}")
        if self._queues.count + len(topics) > config.max_queue_datas:  # else no need to count
            self._check_queue_room_locked(self._queues.new_entries(broker_name, (f[0] for f in topics.values())))

    def _check_queue_room_locked(self, new: int) -> None:
        """RouteTableFull if `new` more queue entries would pass maxQueueDatas."""
        limit = self._config.max_queue_datas
        if self._queues.count + new > limit:
            raise RouteTableFull(f"{new} new topic queue entries would pass maxQueueDatas={limit} "
                                 f"({self._queues.count} held)")

    def _holds_entries_locked(self, live: BrokerLiveInfo | None, registrant: Registrant,
                              entries: bytes | None) -> bool:  # also lock-free (a hint)
        """Does the route table still hold exactly the topic entries this master registered last
        as `entries`, so that the entries of a new registration found unchanged against them need
        no applying? (`live` is the master's live entry, None if it has none; equal entries —
        compared by value, as a worker process gets them through the write log —, the same group
        and id, and no change to the group's queue entries since; the deleting mode needs every
        topic listed.)"""
        if live is None or entries is None or live.topic_entries != entries or live.registration is None:
            return False
        registered = live.registration[0]
        return (registered.broker_name == registrant.broker_name and registered.broker_id == registrant.broker_id
                and live.queue_changes_seen == self._queues.changes_of(registrant.broker_name)
                and not self._config.delete_topic_with_broker_registration)

    def _master_of_locked(self, group: BrokerData, cluster_name: str, broker_id: int) -> RegisterBrokerResult:
        """A slave learns its live master's address and HA address."""
        if broker_id != MASTER_ID:
            master_addr = group.broker_addrs.get(MASTER_ID)
            master_live = None if master_addr is None else self._live.by_key.get((cluster_name, master_addr))
            if master_live is not None:
                return RegisterBrokerResult(master_live.ha_server_addr, master_addr)
        return _NO_MASTER

    def _apply_topic_configs(self, broker_name: str, table: dict[str, QueueFields], listed: int,
                             mappings: dict[str, Any], register_first: bool, version_changed: bool,
                             wipe_write: bool) -> None:
        """Step 10: queue data of a master's (or acting prime slave's) topic table (`listed`
        topics, of which `table` has those not left out as unchanged)."""
        queues = self._queues
        if self._config.delete_topic_with_broker_registration and not mappings:
            queues.remove_topics(broker_name, [t for t in queues.topics_of(broker_name) if t not in table])
        apply_all = register_first or version_changed
        changed, created = queues.put_all(broker_name, table.values(), apply_all, wipe_write)
        # New topics are news. Changes of existing ones can come with every registration (a broker
        # changing a topic per DataVersion), and the route history records each (explainRoute): a log
        # line, or only asking whether to make one, would cost such a registration more than its change.
        if created and log.isEnabledFor(logging.INFO):
            log.info("broker %s: %d of %d topics created, %d changed", broker_name, created, listed, changed - created)
        if apply_all and mappings:
            for topic, info in mappings.items():
                bname = info.get("bname") if isinstance(info, dict) else None
                if not isinstance(bname, str):
                    log.warning("broker %s: static-topic mapping of %s has no bname, ignored", broker_name, topic)
                    continue
                self._mappings.setdefault(topic, {})[bname] = info
                self._changes.topics((topic,))

    def query_data_version(self, cluster_name: str, broker_addr: str) -> DataVersion | None:
        """The broker's stored DataVersion (None: not registered); refreshes its liveness like a
        heartbeat (`update_broker_timestamp`, whose lock-free reasoning holds here too), as RocketMQ
        5.x does whether or not the queried version matches."""
        live = self._live.by_key.get((cluster_name, broker_addr))
        if live is None:
            return None
        live.last_update_timestamp = self._clock()
        return live.data_version

    def update_broker_timestamp(self, cluster_name: str, broker_addr: str) -> bool:
        """BROKER_HEARTBEAT: refresh liveness of a registered broker; False if it is unknown.

        Without the lock: the lookup and the store are each atomic, and a writer racing with them
        (a registration replacing the live entry, the expiry scan removing it after its re-check)
        leaves the tables as if the heartbeat had come just before or just after it; the answer is
        the same either way."""
        live = self._live.by_key.get((cluster_name, broker_addr))
        if live is None:
            return False
        live.last_update_timestamp = self._clock()
        return True

    # ------------------------------------------------------------------ unregistration

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str | None,
                          broker_id: int | None = None) -> RemovedBroker:
        """UNREGISTER_BROKER, applied at once (the broker itself asks, so no freshness check)."""
        with self._lock.write:
            live = self._live.by_key.get((cluster_name, broker_addr))
            removed = self._unregister_locked("unregistered", cluster_name, broker_addr, broker_name, broker_id,
                                              None if live is None else live.channel)
        log.info("%s", removed)
        return removed

    def scan_not_active_brokers(self, now: int | None = None) -> list[RemovedBroker]:
        """Remove brokers silent past their heartbeat timeout; returns them (their channels should be closed).

        Candidates are found under the read lock; each is re-checked under the write lock so a
        broker that heartbeated or re-registered in between stays.
        """
        now = self._clock() if now is None else now
        with self._lock.read:
            expired = self._live.expired(now)
        if not expired:
            return []
        removed = []
        with self._lock.write:
            for key, _ in expired:
                live = self._live.by_key.get(key)
                if live is not None and live.expired(now):
                    removed.append(self._unregister_live_locked("expired", key, live))
        for broker in removed:
            log.warning("%s", broker)
        return removed

    def expiry_candidates(self, now: int) -> list[tuple[LiveKey, int]]:
        """Brokers silent past their timeout at `now`, each with the refresh time it was found at.

        Worker processes do not expire brokers on their own: each proposes these to the write log
        and every worker applies `expire_if_unchanged` in the log's order, so all agree."""
        with self._lock.read:
            return self._live.expired(now)

    def expire_if_unchanged(self, key: LiveKey, last_update_timestamp: int) -> RemovedBroker | None:
        """Expire the broker if it was not refreshed since it was found silent at `last_update_timestamp`."""
        with self._lock.write:
            live = self._live.by_key.get(key)
            if live is None or live.last_update_timestamp != last_update_timestamp:
                return None
            removed = self._unregister_live_locked("expired", key, live)
        log.warning("%s", removed)
        return removed

    def channels(self) -> list[Channel]:
        """The connections current registrations came over."""
        with self._lock.read:
            return self._live.channels()

    def on_channel_destroy(self, channel: Channel) -> list[RemovedBroker]:
        """A connection closed: remove the brokers whose *current* registration came over it."""
        with self._lock.read:
            keys = self._live.keys_of(channel)
        if not keys:
            return []
        removed = []
        with self._lock.write:
            for key in keys:
                live = self._live.by_key.get(key)
                if live is not None and live.channel == channel:
                    removed.append(self._unregister_live_locked("channel closed", key, live))
        for broker in removed:
            log.info("%s", broker)
        return removed

    def _unregister_live_locked(self, reason: str, key: LiveKey, live: BrokerLiveInfo) -> RemovedBroker:
        """Unregister the broker group member that owns a live entry (RocketMQ's setupUnRegisterRequest)."""
        cluster_name, broker_addr = key
        for group in self._brokers.values():
            if group.cluster == cluster_name:
                for broker_id, addr in group.broker_addrs.items():
                    if addr == broker_addr:
                        return self._unregister_locked(reason, cluster_name, broker_addr, group.broker_name,
                                                       broker_id, live.channel)
        return self._unregister_locked(reason, cluster_name, broker_addr, None, None, live.channel)

    def _unregister_locked(self, reason: str, cluster_name: str, broker_addr: str, broker_name: str | None,
                           broker_id: int | None, channel: Channel | None) -> RemovedBroker:
        """RocketMQ 5.x unRegisterBroker for one request plus its topic sweep (reference 4.4)."""
        key = (cluster_name, broker_addr)
        live = self._live.drop(key)
        self._cause(reason, cluster_name, broker_addr, broker_name, broker_id, channel, live)
        self._set_filters(key, [])
        group = None if broker_name is None else self._brokers.get(broker_name)
        if group is not None:
            addrs = group.broker_addrs
            held_min_id = bool(addrs) and addrs[min(addrs)] == broker_addr
            for stale_id in [i for i, addr in addrs.items() if addr == broker_addr]:
                del addrs[stale_id]
                self._queues.group_changed(group.broker_name)
            if not addrs:
                self._remove_broker_group(group.broker_name)
            elif group.enable_acting_master:
                if min(addrs) > MASTER_ID:
                    # The master is gone: its queues stop taking writes until a master returns.
                    self._operate_write_perm(group.broker_name, lambda perm: perm & ~PERM_WRITE)
                if held_min_id:
                    self._min_broker_id_changed(group, broker_addr, None)
        self.removals[reason] = self.removals.get(reason, 0) + 1
        return RemovedBroker(reason, cluster_name, broker_addr, broker_name, broker_id, channel)

    def _min_broker_id_changed(self, group: BrokerData, offline_broker_addr: str | None,
                               ha_broker_addr: str | None) -> None:
        """Report that `group`'s lowest broker id changed, if notifyMinBrokerIdChanged and someone listens."""
        listener = self.min_broker_id_listener
        if listener is not None and self._config.notify_min_broker_id_changed:
            listener(MinBrokerIdChange.of(group.broker_name, group.broker_addrs, offline_broker_addr, ha_broker_addr))

    def _remove_broker_group(self, broker_name: str) -> None:
        """The group's last address left: drop it from every table that names it."""
        del self._brokers[broker_name]
        for cluster_name in [c for c, names in self._clusters.items() if broker_name in names]:
            names = self._clusters[cluster_name]
            names.discard(broker_name)
            if not names:
                del self._clusters[cluster_name]
                log.info("cluster %s removed: no broker left", cluster_name)
        self._queues.remove_group(broker_name)
        mapped = [t for t, infos in self._mappings.items() if broker_name in infos]
        for topic in mapped:
            infos = self._mappings[topic]
            del infos[broker_name]
            if not infos:
                del self._mappings[topic]
        if mapped:
            self._changes.topics(mapped)
        log.info("broker group %s removed", broker_name)

    # ------------------------------------------------------------------ admin operations

    def wipe_write_perm_of_broker(self, broker_name: str | None, requester: str | None = None) -> int:
        """Clear the WRITE bit of every queue of the group; returns how many topics it serves."""
        with self._lock.write:
            self._cause(events.WRITE_PERM_WIPED, None, None, broker_name, None, None, None, requester)
            return self._operate_write_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm_of_broker(self, broker_name: str | None, requester: str | None = None) -> int:
        """Set every queue of the group to READ|WRITE (other bits are lost, as in RocketMQ)."""
        with self._lock.write:
            self._cause(events.WRITE_PERM_ADDED, None, None, broker_name, None, None, None, requester)
            return self._operate_write_perm(broker_name, lambda perm: PERM_READ | PERM_WRITE)

    def _operate_write_perm(self, broker_name: str | None, new_perm: Callable[[int], int]) -> int:
        queues = self._queues
        topics = queues.topics_of(broker_name) if broker_name is not None else []
        by_topic = queues.by_topic
        queues.put_all(broker_name, [(topic, read, write, new_perm(perm), sys_flag) for topic in topics
                                     for read, write, perm, sys_flag in (by_topic[topic][broker_name],)], True, False)
        return len(topics)

    def delete_topic(self, topic: str, cluster_name: str | None = None, requester: str | None = None) -> None:
        """Drop the topic, or only its queues on the brokers of `cluster_name`."""
        with self._lock.write:
            self._cause(events.TOPIC_DELETED, cluster_name, None, None, None, None, None, requester)
            queues = self._queues
            groups = list(self._clusters.get(cluster_name, ()) if cluster_name else queues.by_topic.get(topic, ()))
            for broker_name in groups:
                queues.remove(topic, broker_name)

    def register_topic(self, topic: str, queue_datas: Iterable[QueueData], requester: str | None = None) -> None:
        """REGISTER_TOPIC_IN_NAMESRV: queue data of existing brokers only.

        As RocketMQ: a new topic is created only if every named broker exists; for an existing
        topic the entries are applied in order up to the first unknown broker.
        """
        queue_datas = list(queue_datas)
        with self._lock.write:
            self._cause(events.TOPIC_REGISTERED, None, None, None, None, None, None, requester)
            by_topic = self._queues.by_topic
            if topic not in by_topic and any(q.broker_name not in self._brokers for q in queue_datas):
                return
            queues = by_topic.get(topic, {})
            self._check_queue_room_locked(sum(1 for queue in queue_datas if queue.broker_name not in queues))
            for queue in queue_datas:
                if queue.broker_name not in self._brokers:
                    return
                self._queues.put(topic, queue)

    # ------------------------------------------------------------------ queries

    def pickup_topic_route(self, topic: str) -> TopicRouteData | None:
        """The topic's route (copies), or None when the topic or all its brokers are unknown."""
        with self._lock.read:
            return self._pickup_locked(topic, self._config.support_acting_master)

    def topic_route_body(self, topic: str, standard: bool, order_topic_conf: str | None = None,
                         zone: str | None = None) -> bytes | None:
        """GET_ROUTEINFO_BY_TOPIC's encoded body, from the cache when the route is unchanged; with
        `zone`, the route a client in that zone is answered with (namesrv.routeinfo.zones).

        A hit needs no route-table lock at all: a concurrent writer invalidates under the write
        lock, and a body is only stored by a reader holding the read lock, so it is never stale.
        A zone's body is cached when a group of the route is in that zone: a topic holds at most
        one body per zone its brokers are in, whatever zone names clients send.
        """
        acting = self._config.support_acting_master  # read once: the stamp must describe the body
        stamp = (order_topic_conf, acting)
        variant = standard if zone is None else (standard, zone_key(zone))
        body = self._changes.cache.get(topic, variant, stamp)
        if body is not None:
            return body
        with self._lock.read:
            route = self._pickup_locked(topic, acting)
            if route is None:
                return None
            route.order_topic_conf = order_topic_conf
            cache = True
            if zone is not None:
                route, cache = zone_route(route, zone)
            body = route.encode(standard)
            if cache:
                self._changes.cache.put(topic, variant, stamp, body)
        return body

    def cached_topic_route_bodies(self, queries: Iterable[object], query_type: type,
                                  order_topic_conf: Callable[[str], str | None] | None = None) -> list[bytes | None]:
        """`topic_route_body` of each (topic, standard) of `queries` that is a `query_type` (a tuple
        type) when its answer is cached, else None, `order_topic_conf` giving each topic's (None: no
        topic has one): never locks the route table (reactor-safe)."""
        acting = self._config.support_acting_master
        cache = self._changes.cache
        if order_topic_conf is None:
            return cache.get_many(queries, (None, acting), query_type)
        return [cache.get(query[0], query[1], (order_topic_conf(query[0]), acting)) if type(query) is query_type
                else None for query in queries]

    def _pickup_locked(self, topic: str, acting: bool) -> TopicRouteData | None:
        queues = self._queues.queues_of(topic)
        if queues is None:
            return None
        groups = [self._brokers[name].copy() for name in queues if name in self._brokers]
        if not groups:
            return None
        route = TopicRouteData(list(queues.values()), groups)
        if self._filters:
            for group in groups:
                for addr in group.broker_addrs.values():
                    servers = self._filters.get((group.cluster, addr))
                    if servers is not None:
                        route.filter_server_table[addr] = list(servers)
        mapping = self._mappings.get(topic)
        if mapping is not None:
            route.topic_queue_mapping_by_broker = copy.deepcopy(mapping)
        if acting and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
            self._elect_acting_masters(route, queues)
        return route

    @staticmethod
    def _elect_acting_masters(route: TopicRouteData, queues: dict[str, QueueData]) -> None:
        """4.7 step 5: a masterless acting-master group whose queue is read-only shows its
        lowest-id slave as id 0."""
        for group in route.broker_datas:
            addrs = group.broker_addrs
            if not addrs or MASTER_ID in addrs or not group.enable_acting_master:
                continue
            queue = queues.get(group.broker_name)
            if queue is not None and not queue.perm & PERM_WRITE:
                addrs[MASTER_ID] = addrs.pop(min(addrs))

    def cluster_info(self) -> ClusterInfo:
        with self._lock.read:
            return ClusterInfo({name: group.copy() for name, group in self._brokers.items()},
                               {name: sorted(names) for name, names in self._clusters.items()})

    def broker_member_group(self, cluster_name: str | None, broker_name: str | None) -> BrokerMemberGroup:
        with self._lock.read:
            group = self._brokers.get(broker_name) if broker_name is not None else None
            return BrokerMemberGroup(cluster_name, broker_name, dict(group.broker_addrs) if group else {})

    def all_topics(self) -> TopicList:
        with self._lock.read:
            return TopicList(list(self._queues.by_topic))

    def topics_by_cluster(self, cluster_name: str | None) -> TopicList:
        with self._lock.read:
            names = self._clusters.get(cluster_name, set()) if cluster_name is not None else set()
            return TopicList([topic for topic, queues in self._queues.by_topic.items() if not names.isdisjoint(queues)])

    def system_topics(self) -> TopicList:
        """Cluster and broker names (brokers auto-create topics so named) plus one broker address."""
        with self._lock.read:
            names: dict[str, None] = {}
            for cluster_name, broker_names in self._clusters.items():
                names[cluster_name] = None
                names.update(dict.fromkeys(broker_names))
            broker_addr = next((group.broker_addrs[min(group.broker_addrs)] for group in self._brokers.values()
                                if group.broker_addrs), None)
            return TopicList(list(names), broker_addr)

    def unit_topics(self) -> TopicList:
        return self._topics_by_flag(lambda flag: bool(flag & FLAG_UNIT))

    def has_unit_sub_topics(self) -> TopicList:
        return self._topics_by_flag(lambda flag: bool(flag & FLAG_UNIT_SUB))

    def has_unit_sub_ununit_topics(self) -> TopicList:
        return self._topics_by_flag(lambda flag: bool(flag & FLAG_UNIT_SUB) and not flag & FLAG_UNIT)

    def _topics_by_flag(self, selected: Callable[[int], bool]) -> TopicList:
        """Topics whose *first* queue data's sys flag is selected, as RocketMQ decides."""
        with self._lock.read:
            return TopicList([topic for topic, queues in self._queues.by_topic.items()
                              if selected(next(iter(queues.values()))[3])])  # an Entry's topicSysFlag

    def sizes(self) -> dict[str, int]:
        """How much the route table holds (no lock: each count is read at once)."""
        return {"brokers": len(self._live.by_key), "clusters": len(self._clusters), "brokerGroups": len(self._brokers),
                "topics": len(self._queues.by_topic), "queueDatas": self._queues.count}

    # ------------------------------------------------------------------ copies of the tables

    @contextmanager
    def reading(self) -> Iterator[RouteTables]:
        """The live tables themselves (not copies) under the read lock, for a reader that copies only
        what it needs (namesrv.routeinfo.persist); nothing may change them. The topic table holds
        the stored entries: (readQueueNums, writeQueueNums, perm, topicSysFlag) tuples."""
        with self._lock.read:
            yield RouteTables(self._queues.by_topic, self._brokers, self._clusters, self._live.by_key, self._filters,
                              self._mappings)

    def snapshot(self) -> RouteTables:
        """A deep copy of every table, taken under one read lock."""
        with self._lock.read:
            return self._snapshot_locked()

    def export_tables(self) -> tuple[RouteTables, dict[str, int]]:
        """A snapshot and the per-group queue-change counts, under one read lock: what a restarted
        worker process copies from a sibling (namesrv.writelog.snapshot) to serve what it serves."""
        with self._lock.read:
            return self._snapshot_locked(), self._queues.group_changes()

    def import_tables(self, tables: RouteTables, queue_changes: dict[str, int]) -> None:
        """Replace every table by an `export_tables` result (taken over, not copied); the derived
        indexes are rebuilt and every cached route dropped."""
        with self._lock.write:
            self._cause(events.TABLES_REPLACED)
            for mine, theirs in ((self._brokers, tables.broker_addr_table),
                                 (self._clusters, tables.cluster_addr_table),
                                 (self._filters, tables.filter_server_table),
                                 (self._mappings, tables.topic_queue_mapping_info_table)):
                mine.clear()
                mine.update(theirs)
            self._live.replace(tables.broker_live_table)
            self._queues.replace(tables.topic_queue_table, queue_changes)

    def _snapshot_locked(self) -> RouteTables:
        queues = self._queues
        return RouteTables({topic: queues.queues_of(topic) for topic in queues.by_topic},  # shared, immutable entries
                           {n: g.copy() for n, g in self._brokers.items()},
                           {c: set(names) for c, names in self._clusters.items()},
                           {k: replace(v) for k, v in self._live.items()},
                           {k: list(v) for k, v in self._filters.items()}, copy.deepcopy(self._mappings))

    def cached_route_topics(self) -> set[str]:
        """Topics whose encoded route is cached (for logs, and tests of the invalidation)."""
        return self._changes.cache.topics()

    def route_cache_size(self) -> tuple[int, int]:
        """(topics cached, bytes charged)."""
        return self._changes.cache.size()

    def consistency_indexes(self) -> tuple[dict[Channel, set[LiveKey]], set[str], int]:
        """(the connection index, the groups with pooled entries, the entry count): the derived
        state a consistency check holds to the tables."""
        with self._lock.read:
            return self._live.by_channel(), self._queues.pools(), self._queues.count

    # ------------------------------------------------------------------ route-change tracking

    def track_changes(self) -> None:
        """From now on, record which topics' routes change (for the route-change push)."""
        self._changes.track()

    def take_changes(self) -> set[str]:
        """The topics whose route changed since the last call (between writes: never half of one)."""
        with self._lock.read:
            return self._changes.take()

    def has_topic(self, topic: str) -> bool:
        return topic in self._queues.by_topic

    def _set_filters(self, key: LiveKey, servers: list[str] | None) -> None:
        """Store a broker's filter servers (None: leave as is, empty: remove)."""
        if self._filters_hold(key, servers):
            return
        if servers:
            self._filters[key] = list(servers)
        else:
            del self._filters[key]
        for group in self._brokers.values():
            if key[1] in group.broker_addrs.values():
                self._queues.group_changed(group.broker_name)

    def _filters_hold(self, key: LiveKey, servers: list[str] | None) -> bool:
        """Would `_set_filters(key, servers)` leave the filter-server table as it is?"""
        if servers is None:
            return True
        held = self._filters.get(key)
        return held == servers or (held is None and not servers)

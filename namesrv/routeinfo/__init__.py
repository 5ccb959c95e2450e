"""The route table: brokers, topics, liveness, and the encoded-route cache (reference section 4)."""
from namesrv.routeinfo.manager import (
    SYNC_BROKER_MEMBER_GROUP_PREFIX,
    RouteInfoManager,
    RouteTableFull,
    StaleTopicEntries,
)
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

__all__ = [
    "DEFAULT_BROKER_CHANNEL_EXPIRED_TIME", "SYNC_BROKER_MEMBER_GROUP_PREFIX", "BrokerLiveInfo", "LiveKey",
    "MinBrokerIdChange", "Registrant", "RemovedBroker", "RouteInfoManager", "RouteTableFull", "RouteTables",
    "StaleTopicEntries", "now_ms",
]

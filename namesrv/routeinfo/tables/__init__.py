"""The route table's own tables, one module each (as rocketmq-rust's `route/tables/`): brokers'
liveness, topics' queue entries, and the record of which routes changed. `RouteInfoManager` holds
them under its one lock and runs RocketMQ's steps over them."""
from namesrv.routeinfo.tables.changes import RouteChanges
from namesrv.routeinfo.tables.live import LiveTable
from namesrv.routeinfo.tables.queues import QueueTable

__all__ = ["LiveTable", "QueueTable", "RouteChanges"]

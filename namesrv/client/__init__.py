"""Clients of the NameServer: remoting connections (TCP and ZeroMQ), the producer/admin view of a
NameServer list, and the broker side (registration, heartbeats, unregistration).

Every async class has a blocking twin with the same methods that runs its event loop in a
background thread: AsyncRemotingClient/RemotingClient, AsyncNamesrvClient/NamesrvClient,
AsyncBrokerOuterAPI/BrokerOuterAPI, AsyncBrokerService/BrokerService.
"""
from namesrv.client.api import BrokerIdentity
from namesrv.client.broker import (
    AsyncBrokerOuterAPI,
    AsyncBrokerService,
    BrokerOuterAPI,
    BrokerService,
    BrokerTopicTable,
    clamp_register_period,
)
from namesrv.client.connection import RemotingConnection
from namesrv.client.errors import (InvalidRouteError, MQResponseError, RemotingConnectError, RemotingError,
                                   RemotingTimeoutError, ServerClosedError)
from namesrv.client.namesrv_client import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    AsyncNamesrvClient,
    MessageQueue,
    NamesrvClient,
    ServerResult,
    parse_namesrv_addrs,
    publish_queues,
)
from namesrv.client.remoting import AsyncRemotingClient, RemotingClient, client_tls_context
from namesrv.client.sync import LoopThread
from namesrv.client.zmq_connection import CurveClientKeys, ZmqRemotingConnection

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC", "AsyncBrokerOuterAPI", "AsyncBrokerService", "AsyncNamesrvClient",
    "AsyncRemotingClient", "BrokerIdentity", "BrokerOuterAPI", "BrokerService", "BrokerTopicTable",
    "CurveClientKeys", "InvalidRouteError", "LoopThread", "MQResponseError", "MessageQueue", "NamesrvClient", "RemotingClient",
    "RemotingConnectError", "RemotingConnection", "RemotingError", "RemotingTimeoutError", "ServerClosedError",
    "ServerResult",
    "ZmqRemotingConnection", "clamp_register_period", "client_tls_context", "parse_namesrv_addrs", "publish_queues",
]

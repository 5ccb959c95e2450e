"""Numeric constants of RocketMQ's remoting protocol (reference sections 0.1, 1.4, 1.5, 2.1, 2.3)."""
from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    """Request codes a NameServer handles (plus the one it sends itself)."""

    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_BROKER_MEMBER_GROUP = 901
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    # namesrv's own route-change push (namesrv.processor.route_push), in a range RocketMQ does not use.
    SUBSCRIBE_ROUTE_CHANGES = 88001
    UNSUBSCRIBE_ROUTE_CHANGES = 88002
    #: Server to client, oneway: the changes of subscribed topics' routes.
    ROUTE_CHANGED = 88003
    #: Why a topic has no route, or the one it has (namesrv.routeinfo.explain).
    EXPLAIN_ROUTE = 88004


class ResponseCode(IntEnum):
    """Response codes (RemotingSysResponseCode + the ResponseCode values a NameServer emits)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    QUERY_NOT_FOUND = 22
    GO_AWAY = 1500


class LanguageCode(IntEnum):
    """Sender language: JSON headers carry the name, binary headers the byte."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class SerializeType(IntEnum):
    """Header codec, carried in the top byte of the frame's header-length field."""

    JSON = 0
    ROCKETMQ = 1


class Version(IntEnum):
    """MQVersion ordinals the NameServer reads (reference 0.1)."""

    V3_0_11 = 37
    V4_5_2 = 317
    V4_6_0 = 333
    V4_9_4 = 401
    V4_9_8 = 409
    V5_0_0 = 413
    V5_3_1 = 475
    V5_3_3 = 479


#: The version since which a registration body may be compressed (RegisterBrokerBody), read off the enum
#: once: every registration compares its version with it, and in Python 3.11 a member read off an enum
#: class goes through EnumType's attribute hook, a Python call of its own.
V3_0_11 = Version.V3_0_11

#: The version namesrv claims in its responses (RocketMQ 5.3.3, the newest reference).
SERVER_VERSION = Version.V5_3_3

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

#: Java's int range: code, flag, opaque, version and a topic's int fields must fit in it.
INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1

#: Permission bits of a topic / queue (PermName).
PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_PRIORITY = 8

#: Topic system flags (TopicSysFlag).
FLAG_UNIT = 1
FLAG_UNIT_SUB = 2

#: Default NameServer/max frame size: Netty's maxFrameLength counts the 4-byte length prefix.
DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024

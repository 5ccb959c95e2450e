"""Every request code the NameServer serves, declared once: RocketMQ's `registerProcessor` as a table.

A row says everything the server needs to know about a code: its handler, the executor that runs
it, whether it changes state (its handler is then a `WriteHandler`, prepared where it arrives and
applied in every worker process in their one total order), whether `AdminGuard` may restrict it,
whether Java's answer has a typed response header (then extFields is always present), and
whether the reactor may answer it itself. The
sets the rest of the server uses (write codes, admin codes, codes per executor) are derived
here, never kept by hand. A code missing from the table goes to the public executor and is
answered REQUEST_CODE_NOT_SUPPORTED.

Adding a request code: a row here and its handler (and its number in `RequestCode` if the
protocol did not name it yet).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from namesrv.processor import broker_handlers, config_handlers, kv_handlers, route_handlers
from namesrv.processor.context import Handler, WriteHandler
from namesrv.protocol.codes import RequestCode


class Pool(enum.Enum):
    """The executors of RocketMQ's NamesrvController (the public one serves undeclared codes)."""

    #: clientRequestThreadPoolNums: route queries, so a registration storm cannot starve clients (RIP-29).
    CLIENT = "client"
    #: defaultThreadPoolNums: broker traffic, KV, admin.
    DEFAULT = "default"


class Inline(enum.Enum):
    """What the reactor may answer itself, straight from the frame (namesrv.processor.inline)."""

    #: A route query whose encoded route is cached.
    ROUTE_QUERY = "route query"
    #: A broker's write cheaper than the hand-off: the regular path run on the reactor, which leaves
    #: what is expensive (a large registration body) to the executors (namesrv.processor.write_fast_path).
    WRITE = "write"


@dataclass(frozen=True, slots=True)
class RequestSpec:
    code: RequestCode
    #: A `WriteHandler` for the codes that change routes, broker liveness, the KV table or the config.
    handler: Handler | WriteHandler
    pool: Pool = Pool.DEFAULT
    #: Writes a file (KV table, config): with worker processes, the supervisor's sequencer is the one
    #: writer and applies it before any worker does (namesrv.writelog.sequencer).
    persisted: bool = False
    #: May be restricted by adminAllowedNetworks/adminToken (never broker traffic: brokers send no token).
    admin: bool = False
    #: Java answers with a typed response header: extFields present (maybe `{}`) even on errors.
    response_header: bool = False
    inline: Inline | None = None
    #: The typed reading of the request's header (`RemotingCommand.typed_header`), which the reactor
    #: makes once per header shape for an inline write.
    header: type | None = None

    @property
    def writes(self) -> bool:
        """Changes state: worker processes apply it everywhere, in the write log's order."""
        return isinstance(self.handler, WriteHandler)


_ = RequestSpec
REQUESTS: tuple[RequestSpec, ...] = (
    _(RequestCode.PUT_KV_CONFIG, kv_handlers.put_kv_config, persisted=True, admin=True),
    _(RequestCode.GET_KV_CONFIG, kv_handlers.get_kv_config, response_header=True),
    _(RequestCode.DELETE_KV_CONFIG, kv_handlers.delete_kv_config, persisted=True, admin=True),
    _(RequestCode.GET_KVLIST_BY_NAMESPACE, kv_handlers.get_kvlist_by_namespace),
    _(RequestCode.REGISTER_BROKER, broker_handlers.register_broker, response_header=True, inline=Inline.WRITE,
      header=broker_handlers.RegistrationHeader),
    _(RequestCode.UNREGISTER_BROKER, broker_handlers.unregister_broker),
    # A liveness heartbeat as well as a question: it refreshes the broker's timestamp.
    _(RequestCode.QUERY_DATA_VERSION, broker_handlers.query_data_version, response_header=True, inline=Inline.WRITE,
      header=broker_handlers.BrokerKey),
    _(RequestCode.BROKER_HEARTBEAT, broker_handlers.broker_heartbeat, inline=Inline.WRITE,
      header=broker_handlers.BrokerKey),
    _(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_handlers.get_routeinfo_by_topic, pool=Pool.CLIENT,
      inline=Inline.ROUTE_QUERY),
    _(RequestCode.SUBSCRIBE_ROUTE_CHANGES, route_handlers.subscribe_route_changes, pool=Pool.CLIENT),
    _(RequestCode.UNSUBSCRIBE_ROUTE_CHANGES, route_handlers.unsubscribe_route_changes, pool=Pool.CLIENT),
    # A read behind the admin guard: it names the addresses admins and brokers came from.
    _(RequestCode.EXPLAIN_ROUTE, route_handlers.explain_route, admin=True),
    _(RequestCode.GET_BROKER_CLUSTER_INFO, route_handlers.get_broker_cluster_info),
    _(RequestCode.GET_BROKER_MEMBER_GROUP, route_handlers.get_broker_member_group),
    _(RequestCode.WIPE_WRITE_PERM_OF_BROKER, route_handlers.wipe_write_perm_of_broker, admin=True,
      response_header=True),
    _(RequestCode.ADD_WRITE_PERM_OF_BROKER, route_handlers.add_write_perm_of_broker, admin=True,
      response_header=True),
    _(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, route_handlers.get_all_topic_list),
    _(RequestCode.DELETE_TOPIC_IN_NAMESRV, route_handlers.delete_topic_in_namesrv, admin=True),
    _(RequestCode.REGISTER_TOPIC_IN_NAMESRV, route_handlers.register_topic_in_namesrv, admin=True),
    _(RequestCode.GET_TOPICS_BY_CLUSTER, route_handlers.get_topics_by_cluster),
    _(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, route_handlers.get_system_topic_list),
    _(RequestCode.GET_UNIT_TOPIC_LIST, route_handlers.get_unit_topic_list),
    _(RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST, route_handlers.get_has_unit_sub_topic_list),
    _(RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, route_handlers.get_has_unit_sub_ununit_topic_list),
    _(RequestCode.UPDATE_NAMESRV_CONFIG, config_handlers.update_namesrv_config, persisted=True, admin=True),
    _(RequestCode.GET_NAMESRV_CONFIG, config_handlers.get_namesrv_config),
)
del _

#: code -> its row.
BY_CODE: dict[int, RequestSpec] = {int(spec.code): spec for spec in REQUESTS}
if len(BY_CODE) != len(REQUESTS):
    raise ImportError("a request code is declared twice in namesrv.processor.requests")
if any(spec.persisted and not spec.writes for spec in REQUESTS):
    raise ImportError("a persisted request code of namesrv.processor.requests has no WriteHandler")


def codes(**wanted: object) -> frozenset[int]:
    """The declared codes whose fields have the given values, e.g. `codes(writes=True)`."""
    return frozenset(code for code, spec in BY_CODE.items()
                     if all(getattr(spec, name) == value for name, value in wanted.items()))


SUPPORTED_CODES = frozenset(BY_CODE)
WRITE_CODES = codes(writes=True)
PERSISTED_CODES = codes(persisted=True)
ADMIN_CODES = codes(admin=True)
RESPONSE_HEADER_CODES = codes(response_header=True)
#: code -> the name of its executor (`Pool.value`), as the dispatcher takes it.
POOL_OF: dict[int, str] = {code: spec.pool.value for code, spec in BY_CODE.items()}

"""RequestProcessor: one handler per NameServer request code, and the rules every response follows."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import broker_handlers, config_handlers, kv_handlers, route_handlers
from namesrv.processor.context import Handler, HandlerContext
from namesrv.processor.header import BadRequest
from namesrv.processor.inline import InlineAnswers
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.errors import ProtocolError
from namesrv.routeinfo import RouteInfoManager, now_ms
from namesrv.security import ADMIN_CODES, AdminGuard

if TYPE_CHECKING:
    from namesrv.workers.replication import Replicator

log = logging.getLogger(__name__)

_HANDLERS: dict[int, Handler] = {
    RequestCode.PUT_KV_CONFIG: kv_handlers.put_kv_config,
    RequestCode.GET_KV_CONFIG: kv_handlers.get_kv_config,
    RequestCode.DELETE_KV_CONFIG: kv_handlers.delete_kv_config,
    RequestCode.GET_KVLIST_BY_NAMESPACE: kv_handlers.get_kvlist_by_namespace,
    RequestCode.REGISTER_BROKER: broker_handlers.register_broker,
    RequestCode.UNREGISTER_BROKER: broker_handlers.unregister_broker,
    RequestCode.QUERY_DATA_VERSION: broker_handlers.query_data_version,
    RequestCode.BROKER_HEARTBEAT: broker_handlers.broker_heartbeat,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: route_handlers.get_routeinfo_by_topic,
    RequestCode.GET_BROKER_CLUSTER_INFO: route_handlers.get_broker_cluster_info,
    RequestCode.GET_BROKER_MEMBER_GROUP: route_handlers.get_broker_member_group,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: route_handlers.wipe_write_perm_of_broker,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: route_handlers.add_write_perm_of_broker,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: route_handlers.get_all_topic_list,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: route_handlers.delete_topic_in_namesrv,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: route_handlers.register_topic_in_namesrv,
    RequestCode.GET_TOPICS_BY_CLUSTER: route_handlers.get_topics_by_cluster,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: route_handlers.get_system_topic_list,
    RequestCode.GET_UNIT_TOPIC_LIST: route_handlers.get_unit_topic_list,
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: route_handlers.get_has_unit_sub_topic_list,
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: route_handlers.get_has_unit_sub_ununit_topic_list,
    RequestCode.UPDATE_NAMESRV_CONFIG: config_handlers.update_namesrv_config,
    RequestCode.GET_NAMESRV_CONFIG: config_handlers.get_namesrv_config,
}

#: Every request code with a handler (RocketMQ 5.x's NameServer set, reference 2.3).
SUPPORTED_CODES: frozenset[int] = frozenset(_HANDLERS)
#: Codes served from the client-request pool, apart from broker and admin traffic (reference 7.3).
ROUTE_QUERY_CODES: frozenset[int] = frozenset({RequestCode.GET_ROUTEINFO_BY_TOPIC})
#: Codes that change state (routes, broker liveness, KV table, config): what a worker process
#: publishes to its siblings once applied (namesrv.workers). QUERY_DATA_VERSION and
#: BROKER_HEARTBEAT refresh a broker's liveness; every other code only reads.
WRITE_CODES: frozenset[int] = frozenset({
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.BROKER_HEARTBEAT,
    RequestCode.QUERY_DATA_VERSION, RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
    RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.REGISTER_TOPIC_IN_NAMESRV, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.UPDATE_NAMESRV_CONFIG,
})
#: Codes whose Java response has a typed response header: their responses, errors included,
#: always carry an extFields object (maybe `{}`); all others carry none (reference 1.7, 11.1).
RESPONSE_HEADER_CODES: frozenset[int] = frozenset({
    RequestCode.GET_KV_CONFIG, RequestCode.REGISTER_BROKER, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.QUERY_DATA_VERSION, RequestCode.ADD_WRITE_PERM_OF_BROKER,
})


class RequestProcessor:
    """Decoded request in, response out; sans-IO and safe to call from many threads.

    `process` never raises: bad input becomes SYSTEM_ERROR with a remark naming the problem, an
    unknown code REQUEST_CODE_NOT_SUPPORTED, an admin request the `AdminGuard` refuses
    NO_PERMISSION, and any other failure SYSTEM_ERROR with its text.
    """

    def __init__(self, config: NamesrvConfig, routes: RouteInfoManager, kv: KVConfigManager,
                 clock: Callable[[], int] = now_ms, *, replicator: Replicator | None = None,
                 persist: bool = True) -> None:
        """`replicator`: where a worker process publishes the writes it applies (None: one process).
        `persist=False`: a sibling worker applying a replicated write changes memory only; the
        worker that took the write wrote the KV and config files."""
        self._ctx = HandlerContext(config, routes, kv if persist else kv.memory_only(), clock, clock(),
                                   persist=persist)
        # Read once: the security keys are locked, no request can change them.
        self._admin_guard = AdminGuard.from_config(config)
        self.replicator = replicator
        #: Requests answered from raw frames (the reactor's shortcut past `process`).
        self.inline = InlineAnswers(self._ctx, self.process,
                                    None if replicator is None else replicator.publish_request)

    def process(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """The response to `request` (also for oneway requests: the server drops it)."""
        handler = _HANDLERS.get(request.code)
        if handler is None:
            log.warning("request code %s from %s not supported", request.code, channel)
            return request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                         f" request type {request.code} not supported")
        try:
            refused = self._refused(request, channel)
            response = refused if refused is not None else handler(self._ctx, request, channel)
        except (BadRequest, ProtocolError) as exc:
            log.warning("bad request code %s from %s: %s", request.code, channel, exc)
            response = request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - a handler failure must become an answer, never a dropped connection
            log.exception("request code %s from %s failed", request.code, channel)
            response = request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if request.code in RESPONSE_HEADER_CODES and response.ext_fields is None:
            response.ext_fields = {}
        return response

    def _refused(self, request: RemotingCommand, channel: Channel) -> RemotingCommand | None:
        """NO_PERMISSION for an admin request the guard refuses; None when the request may run."""
        if request.code not in ADMIN_CODES or not self._admin_guard.restricted:
            return None
        refusal = self._admin_guard.refusal(request.ext_fields, channel.remote_addr)
        if refusal is None:
            log.info("admin request code %s from %s admitted", request.code, channel)
            return None
        log.warning("admin request code %s from %s refused: %s", request.code, channel, refusal)
        return request.make_response(ResponseCode.NO_PERMISSION, refusal)

"""The request layer: one handler per NameServer request code (reference section 2).

All 23 request codes of RocketMQ 5.x's NameServer are handled, each declared once in
`namesrv.processor.requests`. Where this layer deliberately differs from RocketMQ:

* UNREGISTER_BROKER, expiry and channel close unregister synchronously (4.9.8 style) and re-check
  freshness under the write lock; 5.x queues them and can wipe a fresh re-registration (#11043).
* An unknown code gets REQUEST_CODE_NOT_SUPPORTED (as 5.x; 4.9.8 never answers).
* A header field a handler cannot do without (the topic of a route/topic request, the broker
  identity of REGISTER/UNREGISTER_BROKER, QUERY_DATA_VERSION, BROKER_HEARTBEAT) or a number that
  does not parse is SYSTEM_ERROR naming the field; RocketMQ logs it and runs on with null.
* UPDATE_NAMESRV_CONFIG changes only `NamesrvConfig.remote_updatable()` keys, all-or-nothing,
  and persists the config atomically; RocketMQ accepts any key outside its black list.
* Admin codes (the table's `admin` rows) can be restricted to `adminAllowedNetworks` and/or an
  `adminToken` extField (NO_PERMISSION naming the rule); RocketMQ's NameServer has no access
  control. Both are off by default.
* A REGISTER_BROKER body with more than `maxTopicsPerRegistration` topics is SYSTEM_ERROR, found
  before the body is decoded; RocketMQ decodes any body that fits in a frame. A registration that
  would pass `maxBrokers` or `maxQueueDatas` in the whole route table is SYSTEM_ERROR naming the
  limit and changes nothing; RocketMQ has no such bound.
* The single-topic registration guard (5.x) refuses without side effects (5.x first adds the
  broker name to its cluster and may create an empty broker group).
* A route query in zone mode (ZoneRouteRPCHook, namesrv.routeinfo.zones) keeps the JSON flavour the
  client asked for and its zone's static-topic mappings only; 5.x re-encodes it in the legacy
  flavour. Route-change subscriptions in zone mode are pushed their zone's routes.
* NOTIFY_MIN_BROKER_ID_CHANGE (notifyMinBrokerIdChanged) is sent when the broker that held the
  group's lowest id leaves, found by its address; 5.x trusts UNREGISTER_BROKER's brokerId and can
  notify when nothing changed.
* Not implemented: clusterTest mode, GO_AWAY (the server's concern).
"""
from namesrv.processor.core import RequestProcessor
from namesrv.processor.requests import (ADMIN_CODES, BY_CODE, PERSISTED_CODES, REQUESTS, RESPONSE_HEADER_CODES,
                                        SUPPORTED_CODES, WRITE_CODES, Pool, RequestSpec)

__all__ = ["ADMIN_CODES", "BY_CODE", "PERSISTED_CODES", "REQUESTS", "RESPONSE_HEADER_CODES", "SUPPORTED_CODES",
           "WRITE_CODES", "Pool", "RequestProcessor", "RequestSpec"]

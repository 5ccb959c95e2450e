"""How many topics a REGISTER_BROKER body carries, found before the body is decoded.

Decoding is the expensive part of a registration: a 12 MiB JSON body of one million empty
topics takes seconds of CPU and hundreds of MiB to turn into TopicConfig objects, and a
compressed body is worse per byte. `maxTopicsPerRegistration` must therefore be enforced on the
undecoded body, cheaply:

* compressed form (reference 3.6): the topic count is an int32 right after the DataVersion blob,
  so only that prefix is inflated (`topic.compressed_topic_count`, the decode's own reader);
* JSON forms: every topic entry takes at least 4 bytes (`0:{},`), so a body of at most 4 x limit
  bytes cannot exceed it (the common case, free); nor can one with no more `[` and `{` than the
  limit (every topic is a JSON object of its own; `count_containers`, one pass without the
  interpreter lock, the count jsonbody.check_parse_cost makes); only a body with more has its
  topicConfigTable's members counted exactly: by the fast path's scanner, which builds nothing
  (so a fraction of a parse's time), else by the lenient parser.
"""
from __future__ import annotations

from namesrv import fastpath
from namesrv.protocol import jsonbody
from namesrv.protocol.codes import V3_0_11
from namesrv.protocol.topic import compressed_topic_count, table_path


def topic_count_beyond(limit: int, body: bytes | None, compressed: bool, version: int) -> int | None:
    """The number of topics `body` carries when it is more than `limit`, else None.

    None also for a body too malformed to say (its decode reports what is wrong); a JSON body
    that does not parse raises the same ProtocolError its decode would.
    """
    if not body:
        return None
    if version >= V3_0_11 and compressed:
        count = compressed_topic_count(body)
    elif len(body) <= 4 * limit or fastpath.count_containers(body) <= limit:
        return None
    else:
        count = _json_topic_count(body, version)
    return count if count is not None and count > limit else None


def _json_topic_count(body: bytes, version: int) -> int | None:
    """Entries of the topicConfigTable, located as RegisterBrokerBody.decode locates it."""
    count = fastpath.count_entries(body, table_path(version))
    if count is not None:
        return count
    if version < V3_0_11:
        wrapper = jsonbody.loads(body, "TopicConfigSerializeWrapper")
    else:
        outer = jsonbody.loads(body, "RegisterBrokerBody")
        wrapper = outer.get("topicConfigSerializeWrapper") if isinstance(outer, dict) else None
    table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
    return len(table) if isinstance(table, dict) else None

"""What may enter the route table: topic names, queue counts, permissions and broker names.

Anyone who reaches the port may register a broker (RocketMQ has no access control on
REGISTER_BROKER), and everything registered is stored, answered to every client and logged. So
a registration is checked before anything is applied, and refused whole with the rule it broke:

* a topic name follows RocketMQ's TopicValidator (non-empty, at most 127 characters of
  `%|a-zA-Z0-9_-`), the rule RocketMQ applies where topics are created;
* a topic's read and write queue counts lie in [0, maxQueueNumsPerTopic] and its permission is
  made of PermName's four bits (RocketMQ stores any int32; clients build an object per queue);
* broker and cluster names and addresses, for which RocketMQ has no rule, are at most
  MAX_NAME_LENGTH characters with no control character (they appear in logs and admin tables).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from namesrv.fastpath.registration import QueueFacts
from namesrv.routeinfo.model import Registrant

#: RocketMQ's TopicValidator: TOPIC_MAX_LENGTH and the allowed characters (a regex class).
TOPIC_MAX_LENGTH = 127
TOPIC_CHARACTERS = "%|a-zA-Z0-9_-"
_TOPIC = re.compile(f"[{TOPIC_CHARACTERS}]{{1,{TOPIC_MAX_LENGTH}}}")
_TOPIC_CHARACTERS = re.compile(f"[{TOPIC_CHARACTERS}]*")
#: PermName: PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT.
PERM_BITS = 0b1111
#: Broker and cluster names, broker and HA addresses.
MAX_NAME_LENGTH = 255


class IllegalRoute(ValueError):
    """A registration breaks a rule of what may enter the route table; the message names it."""


def check_names(registrant: Registrant) -> None:
    """Who a registration says it is (`RegistrationHeader.registrant`)."""
    for value in (registrant.cluster_name, registrant.broker_name, registrant.broker_addr, registrant.ha_server_addr,
                  registrant.zone_name):
        if value is not None and (len(value) > MAX_NAME_LENGTH or not value.isprintable()):
            for field, wire_name in _NAMES:
                if getattr(registrant, field) == value:
                    raise IllegalRoute(f"{wire_name} {value[:64]!r} is illegal: at most {MAX_NAME_LENGTH} "
                                       "characters, no control characters")


#: The registrant's fields `check_names` checks, with their names on the wire.
_NAMES = (("cluster_name", "clusterName"), ("broker_name", "brokerName"), ("broker_addr", "brokerAddr"),
          ("ha_server_addr", "haServerAddr"), ("zone_name", "__ZONE_NAME"))


def check_topic(topic: Any) -> None:
    if type(topic) is not str or _TOPIC.fullmatch(topic) is None:
        shown = topic[:64] if isinstance(topic, str) else topic
        raise IllegalRoute(f"topic {shown!r} is illegal: allowing only ^[%|a-zA-Z0-9_-]+$ of at most "
                           f"{TOPIC_MAX_LENGTH} characters")


def queues_within(facts: QueueFacts, max_queue_nums: int) -> bool:
    """Would `check_queues` pass every entry `facts` sums up (fastpath.scan_registration's)?
    Exactly when it would: each rule bounds one field of one entry, so the extremes decide, and a
    large table is checked without a look at each of its entries."""
    characters, shortest, longest, fewest, most, perm_bits = facts
    return (_TOPIC_CHARACTERS.fullmatch(characters) is not None and 1 <= shortest and longest <= TOPIC_MAX_LENGTH
            and 0 <= fewest and most <= max_queue_nums and not perm_bits & ~PERM_BITS)


def check_queues_summed(facts: QueueFacts | None, queues: Iterable[tuple[str, int, int, int, int]],
                        max_queue_nums: int) -> None:
    """`check_queues`, decided on `facts` (what `queues` hold, summed up: a decode's, or
    fastpath.registration.queue_facts of a snapshot's entries): only entries the facts refuse, or
    that have none, are walked, for the first offender's message."""
    if facts is None or not queues_within(facts, max_queue_nums):
        check_queues(queues, max_queue_nums)


def check_queues(queues: Iterable[tuple[str, int, int, int, int]], max_queue_nums: int) -> None:
    """(topic, readQueueNums, writeQueueNums, perm, topicSysFlag) of each topic declared."""
    for topic, read, write, perm, _ in queues:
        check_topic(topic)
        if not (0 <= read <= max_queue_nums and 0 <= write <= max_queue_nums):
            raise IllegalRoute(f"topic {topic!r} declares {read} read and {write} write queues: at most "
                               f"{max_queue_nums} each (maxQueueNumsPerTopic)")
        if perm & ~PERM_BITS:
            raise IllegalRoute(f"topic {topic!r} has perm {perm}: only PermName's bits ({PERM_BITS}) are allowed")

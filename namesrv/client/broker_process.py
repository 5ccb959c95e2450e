"""A simulated broker as its own process: `python -m namesrv.client.broker_process -n host:port ...`.

It registers a generated topic table with every NameServer, keeps registering every period and
unregisters on SIGTERM/SIGINT. After the first registration round it prints one JSON line
({"event": "registered", "namesrv": [addresses that answered], "masterAddr": ...}) so a parent
can wait for it. Killing it with SIGKILL drops its connections, which a NameServer must notice.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence

from namesrv.client.api import BrokerIdentity
from namesrv.client.broker import DEFAULT_REGISTER_PERIOD_MS, AsyncBrokerService, BrokerTopicTable
from namesrv.protocol.topic import TopicConfig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m namesrv.client.broker_process", description=__doc__)
    parser.add_argument("-n", "--namesrv", required=True, help="host:port[;host:port]")
    parser.add_argument("--cluster", default="DefaultCluster")
    parser.add_argument("--broker-name", required=True)
    parser.add_argument("--broker-addr", required=True, help="the address the broker announces, host:port")
    parser.add_argument("--broker-id", type=int, default=0)
    parser.add_argument("--ha-addr", default="", help="HA address announced to slaves")
    parser.add_argument("--topics", type=int, default=1, help="number of generated topics")
    parser.add_argument("--topic-prefix", default="SimTopic")
    parser.add_argument("--queues", type=int, default=4, help="read and write queues per topic")
    parser.add_argument("--register-period-ms", type=int, default=DEFAULT_REGISTER_PERIOD_MS,
                        help="registration period, clamped to [10 s, 60 s] like RocketMQ")
    parser.add_argument("--period-override-ms", type=int, default=None,
                        help="TESTS ONLY: replace the clamped period")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=None,
                        help="expiry the NameServer applies to this broker (default: its own, 120 s)")
    parser.add_argument("--timeout", type=float, default=3.0, help="registration timeout, seconds")
    return parser


async def run(args: argparse.Namespace) -> None:
    identity = BrokerIdentity(args.cluster, args.broker_name, args.broker_addr, args.broker_id, args.ha_addr,
                              heartbeat_timeout_ms=args.heartbeat_timeout_ms)
    topics = BrokerTopicTable(TopicConfig(f"{args.topic_prefix}{i}", args.queues, args.queues)
                              for i in range(args.topics))
    service = AsyncBrokerService(identity, args.namesrv, topics, register_period_ms=args.register_period_ms,
                                 period_override_ms=args.period_override_ms, register_timeout=args.timeout)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    results = await service.start()
    print(json.dumps({"event": "registered", "namesrv": list(results), "masterAddr": service.master_addr}),
          flush=True)
    await stop.wait()
    await service.stop()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(run(build_parser().parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

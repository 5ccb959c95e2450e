"""namesrv-admin: inspect and change running NameServers (ours or Apache RocketMQ's) like mqadmin does.

Subcommands and flags follow mqadmin (`-n host:port[;host:port]`, or NAMESRV_ADDR), plus namesrv's
own explainRoute (why a topic has no route) and diff (do the NameServers agree?). Output is a
human table, or JSON with `--json`. Writes (updateKvConfig, deleteKvConfig, wipeWritePerm,
addWritePerm, deleteTopic, updateNamesrvConfig) go to every NameServer in -n and report per
server. Exit status: 0 on success, 1 when any NameServer failed (its remark on stderr), 2 on
bad usage.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from namesrv.client.connection import ZMQ_HINT, speaks_zeromq
from namesrv.client.errors import MQResponseError, RemotingError, ServerClosedError
from namesrv.client.namesrv_client import NamesrvClient, ServerResult, parse_namesrv_addrs
from namesrv.client.remoting import AsyncRemotingClient, client_tls_context
from namesrv.divergence.compare import DEFAULT_MAX_ITEMS
from namesrv.divergence.fetch import DEFAULT_PAGE_TOPICS, RemoteSource, compare
from namesrv.protocol import jsonbody
from namesrv.protocol.codes import PERM_INHERIT, PERM_READ, PERM_WRITE, ResponseCode, SerializeType
from namesrv.errors import ProtocolError
from namesrv.protocol.route import ClusterInfo, TopicRouteData
from namesrv.routeinfo.explain import when

#: How long explainRoute waits for EXPLAIN_ROUTE: RocketMQ 4.9.x NameServers never answer a code they do not know.
EXPLAIN_TIMEOUT = 1.5

PROG = "namesrv-admin"
Handler = Callable[[NamesrvClient, argparse.Namespace], int]


# ---- output helpers ----
def emit_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def emit_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def fail(command: str, message: str) -> None:
    print(f"{PROG} {command}: {message}", file=sys.stderr)


def explain(error: BaseException) -> str:
    """An error as the user reads it: the server's remark with its response code's name; a server that
    closed a plain connection unanswered may want --tls."""
    if isinstance(error, MQResponseError):
        try:
            name = ResponseCode(error.code).name
        except ValueError:
            name = "unknown code"
        return f"{error.remark} (response code {error.code}, {name})"
    if isinstance(error, ServerClosedError) and error.plain:
        return f"{error}: {ZMQ_HINT if speaks_zeromq(error.address) else 'the server may require TLS (--tls)'}"
    return str(error)


def perm_text(perm: int) -> str:
    flags = "".join(letter for bit, letter in ((PERM_READ, "R"), (PERM_WRITE, "W"), (PERM_INHERIT, "X")) if perm & bit)
    return f"{perm} ({flags or '-'})"


def route_json(route: TopicRouteData) -> dict[str, Any]:
    return jsonbody.loads(route.encode(standard=True), "TopicRouteData")


def cluster_json(info: ClusterInfo) -> dict[str, Any]:
    return jsonbody.loads(info.encode(), "ClusterInfo")


def report(command: str, args: argparse.Namespace, results: list[ServerResult[Any]], what: str,
           value_key: str | None = None) -> int:
    """Per-server outcomes of a write: each failure once, on stderr with its reason; successes on stdout
    (with --json, every outcome as JSON on stdout). 1 if any server failed."""
    rows = []
    for result in results:
        entry: dict[str, Any] = {"namesrvAddr": result.address, "success": result.ok}
        if result.ok and value_key is not None:
            entry[value_key] = result.value
        if isinstance(result.error, MQResponseError):
            entry.update(code=result.error.code, remark=result.error.remark)
        elif result.error is not None:
            entry["error"] = explain(result.error)
        if result.error is not None:
            fail(command, f"{what} on {result.address} failed: {explain(result.error)}")
        elif not args.json:
            extra = f", {value_key}={entry[value_key]}" if value_key is not None else ""
            print(f"{what} in name server[{result.address}] OK{extra}")
        rows.append(entry)
    if args.json:
        emit_json(rows)
    return 0 if all(result.ok for result in results) else 1


# ---- subcommands ----
def cluster_list(client: NamesrvClient, args: argparse.Namespace) -> int:
    info = client.get_cluster_info()
    if args.clusterName:
        names = set(info.cluster_addr_table.get(args.clusterName, []))
        info = ClusterInfo({n: b for n, b in info.broker_addr_table.items() if n in names},
                           {args.clusterName: sorted(names)} if names else {})
    if args.json:
        emit_json(cluster_json(info))
        return 0
    rows = []
    for cluster, broker_names in sorted(info.cluster_addr_table.items()):
        for broker_name in sorted(broker_names):
            broker = info.broker_addr_table.get(broker_name)
            for broker_id, addr in sorted((broker.broker_addrs if broker else {}).items()):
                rows.append((cluster, broker_name, broker_id, addr))
    emit_table(("#Cluster Name", "#Broker Name", "#BID", "#Addr"), rows)
    return 0


def topic_route(client: NamesrvClient, args: argparse.Namespace) -> int:
    route = client.fetch_topic_route(args.topic)
    if args.json:
        emit_json(route_json(route))
        return 0
    emit_table(("#Broker Name", "#Cluster", "#BID", "#Addr"),
               [(b.broker_name, b.cluster, broker_id, addr)
                for b in sorted(route.broker_datas, key=lambda b: b.broker_name)
                for broker_id, addr in sorted(b.broker_addrs.items())])
    print()
    emit_table(("#Broker Name", "#Read Queues", "#Write Queues", "#Perm", "#Sys Flag"),
               [(q.broker_name, q.read_queue_nums, q.write_queue_nums, perm_text(q.perm), q.topic_sys_flag)
                for q in sorted(route.queue_datas, key=lambda q: q.broker_name)])
    if route.order_topic_conf:
        print(f"\norderTopicConf: {route.order_topic_conf}")
    return 0


def topic_list(client: NamesrvClient, args: argparse.Namespace) -> int:
    topics = sorted(client.get_all_topic_list())
    if not args.clusterModel:
        if args.json:
            emit_json({"topicList": topics})
        else:
            print("\n".join(topics))
        return 0
    info = client.get_cluster_info()
    pairs = sorted((cluster, topic) for cluster in info.cluster_addr_table
                   for topic in client.get_topics_by_cluster(cluster))
    placed = {topic for _, topic in pairs}
    pairs += [("", topic) for topic in topics if topic not in placed]
    if args.json:
        emit_json({"topicList": [{"clusterName": cluster, "topic": topic} for cluster, topic in pairs]})
    else:
        emit_table(("#Cluster Name", "#Topic"), pairs)
    return 0


def get_kv_config(client: NamesrvClient, args: argparse.Namespace) -> int:
    value = client.get_kv_config(args.namespace, args.key)
    if args.json:
        emit_json({"namespace": args.namespace, "key": args.key, "value": value})
    else:
        print(f"get kv config success, namespace: {args.namespace}, key: {args.key}, value: {value}.")
    return 0


def update_kv_config(client: NamesrvClient, args: argparse.Namespace) -> int:
    return report(args.command, args, client.put_kv_config(args.namespace, args.key, args.value),
                  f"update kv config [{args.namespace}] {args.key}={args.value}")


def delete_kv_config(client: NamesrvClient, args: argparse.Namespace) -> int:
    return report(args.command, args, client.delete_kv_config(args.namespace, args.key),
                  f"delete kv config [{args.namespace}] {args.key}")


def wipe_write_perm(client: NamesrvClient, args: argparse.Namespace) -> int:
    return report(args.command, args, client.wipe_write_perm_of_broker(args.brokerName),
                  f"wipe write perm of broker[{args.brokerName}]", "wipeTopicCount")


def add_write_perm(client: NamesrvClient, args: argparse.Namespace) -> int:
    return report(args.command, args, client.add_write_perm_of_broker(args.brokerName),
                  f"add write perm of broker[{args.brokerName}]", "addTopicCount")


def delete_topic(client: NamesrvClient, args: argparse.Namespace) -> int:
    scope = f" from cluster [{args.clusterName}]" if args.clusterName else ""
    return report(args.command, args, client.delete_topic(args.topic, args.clusterName),
                  f"delete topic [{args.topic}]{scope}")


def get_namesrv_config(client: NamesrvClient, args: argparse.Namespace) -> int:
    results = client.get_namesrv_configs()
    for result in results:
        if result.error is not None:
            fail(args.command, f"get config of {result.address} failed: {explain(result.error)}")
    if args.json:
        emit_json({r.address: r.value for r in results if r.ok})
    else:
        for result in results:
            if result.ok:
                print(f"============{result.address}============")
                for key, value in sorted(result.value.items()):
                    print(f"{key:<50s}=  {value}")
    return 0 if all(r.ok for r in results) else 1


def update_namesrv_config(client: NamesrvClient, args: argparse.Namespace) -> int:
    return report(args.command, args, client.update_namesrv_config({args.key: args.value}),
                  f"update name server config {args.key}={args.value}")


def explain_route(client: NamesrvClient, args: argparse.Namespace) -> int:
    """Each namesrv's explanation from its route history, then whether every NameServer of -n has a route now."""
    explained = client.explain_route(args.topic, min(args.timeout, EXPLAIN_TIMEOUT))
    routes = client.topic_routes(args.topic)
    now = [{"namesrvAddr": result.address, "route": result.ok,
            "brokers": sorted(q.broker_name for q in result.value.queue_datas) if result.ok else [],
            "error": None if result.ok else _error_text(result.error)} for result in routes]
    if args.json:
        emit_json({"explanations": {r.address: r.value if r.ok else {"error": _error_text(r.error)} for r in explained},
                   "now": now})
    else:
        for result in explained:
            print(f"{args.topic} on {result.address}:")
            if not result.ok:
                print(f"  no route history: {_error_text(result.error)} (not a namesrv?)")
                continue
            answer = result.value
            print(f"  {answer['verdict']}")
            history = answer.get("history") or {}
            if history.get("dropped"):
                print(f"  ({history['dropped']} older events of this topic were dropped)")
            for event in answer["events"]:
                print(f"  {when(event['at'])}  {event['text']}")
        if len(routes) > 1:
            print("\nRoute now on each NameServer:")
            emit_table(("#NameServer", "#Route", "#Brokers"),
                       [(entry["namesrvAddr"], "yes" if entry["route"] else f"no ({entry['error']})",
                         ", ".join(entry["brokers"])) for entry in now])
    return 0 if any(result.ok for result in explained) else 1


def diff(client: NamesrvClient, args: argparse.Namespace) -> int:
    """Compare the route tables of every NameServer of -n (exit 0: they agree, 1: they differ, 3: one
    could not be read)."""
    addresses = client.addresses
    if len(addresses) < 2:
        fail(args.command, "name at least two NameServers: -n host:port;host:port[;...]")
        return 2

    async def run() -> dict[str, Any]:
        remoting = AsyncRemotingClient(timeout=args.timeout, connect_timeout=args.timeout,
                                       serialize_type=SerializeType[args.serialize_type], tls=args.tls_context)
        started = time.monotonic()
        late = (lambda: time.monotonic() - started > args.max_seconds) if args.max_seconds else (lambda: False)
        try:
            comparison = await compare([RemoteSource(remoting, address) for address in addresses],
                                       page_topics=args.page, routes_per_second=args.rate or None,
                                       max_items=args.max_items, stopped=late)
        finally:
            await remoting.close()
        return {**comparison.report(time.monotonic() - started), "complete": not late()}

    report = asyncio.run(run())
    if args.json:
        emit_json(report)
    else:
        verdict = "agree" if report["agree"] else "differ"
        if not report["complete"]:
            verdict += f" so far (stopped after --max-seconds {args.max_seconds:g})"
        print(f"{len(addresses)} NameServers {verdict}: {report['topicsCompared']} topic routes compared in "
              f"{report['seconds']:.1f} s")
        for line in report["summary"]:
            print(f"  {line}")
    if report["unreachable"]:
        return 3
    return 0 if report["agree"] else 1


def _error_text(error: Exception | None) -> str:
    if isinstance(error, MQResponseError):
        name = ResponseCode(error.code).name if error.code in ResponseCode._value2member_map_ else str(error.code)
        return f"{name}: {(error.remark or '').splitlines()[0] if error.remark else ''}"
    return f"{type(error).__name__}: {error}"


# ---- parser ----
def _option(parser: argparse.ArgumentParser, short: str, long: str, help_text: str, required: bool = True) -> None:
    parser.add_argument(f"-{short}", f"--{long}", dest=long, required=required, help=help_text)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namesrvAddr", dest="namesrv", default=os.environ.get("NAMESRV_ADDR"),
                        help="NameServer address list, host:port[;host:port] (default: $NAMESRV_ADDR)")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for each answer (default 3)")
    common.add_argument("--token", default=os.environ.get("NAMESRV_ADMIN_TOKEN"),
                        help="admin token for NameServers that set adminToken (default: $NAMESRV_ADMIN_TOKEN; "
                             "prefer the variable: a flag shows in ps and shell history)")
    common.add_argument("--serialize-type", choices=[t.name for t in SerializeType], default="JSON",
                        help="request header codec (default JSON)")
    common.add_argument("--tls", action="store_true",
                        help="connect with TLS (RocketMQ's -Dtls.enable=true); without --tls-trust-cert any server "
                             "certificate is accepted, as RocketMQ's test mode")
    common.add_argument("--tls-trust-cert", metavar="PEM", help="CAs the server's certificate must chain to (implies --tls)")
    common.add_argument("--tls-cert", metavar="PEM", help="client certificate chain, for servers that ask one (implies --tls)")
    common.add_argument("--tls-key", metavar="PEM", help="the client certificate's private key (default: in --tls-cert)")
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    def command(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    sub = command("clusterList", cluster_list, "List clusters, broker groups and broker addresses.")
    _option(sub, "c", "clusterName", "only this cluster", required=False)
    sub = command("topicRoute", topic_route, "Examine a topic's route.")
    _option(sub, "t", "topic", "topic name")
    sub.add_argument("-l", "--list", action="store_true",
                     help="accepted for mqadmin compatibility (tables are the default)")
    sub = command("topicList", topic_list, "List every topic the NameServer knows.")
    sub.add_argument("-c", "--clusterModel", action="store_true", help="also show the cluster of each topic")
    sub = command("getKvConfig", get_kv_config, "Get a KV config value.")
    _option(sub, "s", "namespace", "namespace")
    _option(sub, "k", "key", "key")
    sub = command("updateKvConfig", update_kv_config, "Create or update a KV config value on every NameServer.")
    _option(sub, "s", "namespace", "namespace")
    _option(sub, "k", "key", "key")
    _option(sub, "v", "value", "value")
    sub = command("deleteKvConfig", delete_kv_config, "Delete a KV config value on every NameServer.")
    _option(sub, "s", "namespace", "namespace")
    _option(sub, "k", "key", "key")
    sub = command("wipeWritePerm", wipe_write_perm, "Wipe the write permission of a broker on every NameServer.")
    _option(sub, "b", "brokerName", "broker name")
    sub = command("addWritePerm", add_write_perm, "Restore the write permission of a broker on every NameServer.")
    _option(sub, "b", "brokerName", "broker name")
    sub = command("deleteTopic", delete_topic, "Delete a topic from every NameServer (not from brokers).")
    _option(sub, "t", "topic", "topic name")
    _option(sub, "c", "clusterName", "only remove the topic's queues on this cluster's brokers", required=False)
    sub = command("explainRoute", explain_route, "Why a topic has no route (or the one it has): each namesrv's "
                  "route history, and whether each NameServer of -n has a route for it now.")
    _option(sub, "t", "topic", "topic name")
    sub = command("diff", diff, "Compare the route tables of the NameServers of -n (namesrv or RocketMQ's) through "
                  "their standard requests: brokers, topics and queue entries that differ, and which NameServers "
                  "hold what. Exit status 0: they agree; 1: they differ; 3: one could not be read.")
    sub.add_argument("--page", type=int, default=DEFAULT_PAGE_TOPICS,
                     help=f"route queries in flight per NameServer (default {DEFAULT_PAGE_TOPICS})")
    sub.add_argument("--rate", type=float, default=0,
                     help="most route queries per second per NameServer (default 0: as fast as they answer)")
    sub.add_argument("--max-items", type=int, default=DEFAULT_MAX_ITEMS,
                     help=f"differences listed of each kind; the rest are counted (default {DEFAULT_MAX_ITEMS})")
    sub.add_argument("--max-seconds", type=float, default=0,
                     help="stop comparing after this long and report what was compared, marked incomplete "
                          "(default 0: compare everything)")
    command("getNamesrvConfig", get_namesrv_config, "Print the configuration of every NameServer.")
    sub = command("updateNamesrvConfig", update_namesrv_config, "Update a configuration key on every NameServer.")
    _option(sub, "k", "key", "config key")
    _option(sub, "v", "value", "config value")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        addresses = parse_namesrv_addrs(args.namesrv or "")
    except ValueError as exc:
        parser.error(f"-n: {exc}")
    tls = None
    if args.tls or args.tls_trust_cert or args.tls_cert:
        tls = client_tls_context(args.tls_trust_cert, args.tls_cert, args.tls_key)
    args.tls_context = tls
    client = NamesrvClient(addresses, timeout=args.timeout, connect_timeout=args.timeout,
                           serialize_type=SerializeType[args.serialize_type], admin_token=args.token, tls=tls)
    try:
        return args.handler(client, args)
    except (RemotingError, ProtocolError) as exc:
        fail(args.command, explain(exc))
        return 1
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())

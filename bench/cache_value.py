"""What each cache of namesrv.caches saves: the request path with and without it, in one run.

    python -m bench cache-value                # 5 alternating rounds of 0.5 s per leg
    python -m bench cache-value --rounds 9 --seconds 1

Sans-IO: the request processor and its route table in this process, fed pre-rendered frames of the
throughput verb's fleet (one broker, 100 topics of 8 queues), the way the reactor feeds them
(`InlineAnswers.answer_all` on each chunk, what it hands back processed and encoded as an
executor would). For each cache, legs alternate "with" and "without" (the cache given no bytes;
bench/lib/rounds.py), and the median of each is printed with their ratio: how many times faster the
path is with it.

* seen headers       route queries and unchanged re-registrations, header parsed every time without;
* registration answers  unchanged re-registrations, response header encoded every time without;
* route bodies       route queries, route encoded (under the read lock) every time without.
"""
from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.lib import cli
from bench.lib.fleet import FleetShape, register_body, register_template, route_template
from bench.lib.output import Printed, write_results
from bench.lib.rounds import alternate, median
from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.processor.seen_headers import SeenHeaders
from namesrv.protocol import DataVersion
from namesrv.remoting.codecs import encode_reply
from namesrv.routeinfo import RouteInfoManager
from namesrv.routeinfo.cache import DEFAULT_MAX_BYTES

CHUNK = 32
CLIENT = Channel("tcp", b"client", "127.0.0.1:50000")
BROKER = Channel("tcp", b"broker", "127.0.0.1:50001")


class Server:
    """A processor over a route table holding the fleet's broker, with the caches sized as asked."""

    def __init__(self, workdir: Path, fleet: FleetShape, *, seen_bytes: int | None = None,
                 template_bytes: int | None = None, route_bytes: int = DEFAULT_MAX_BYTES) -> None:
        config = NamesrvConfig(kv_config_path=str(workdir / "kv.json"), config_store_path=str(workdir / "ns.props"))
        self.routes = RouteInfoManager(config, route_cache_bytes=route_bytes)
        kv = KVConfigManager(config.kv_config_path)
        self.processor = RequestProcessor(config, self.routes, kv)
        inline = self.processor.inline
        if seen_bytes is not None:
            inline.seen = SeenHeaders(inline.reader, max_bytes=seen_bytes)
        if template_bytes is not None:
            inline.writes.templates.max_bytes = template_bytes
        broker = fleet.broker(0)
        self.register_frames = [register_template(fleet, broker, register_body(
            fleet, broker.cluster, DataVersion(1, 1))).render(i + 1)[4:] for i in range(CHUNK)]
        topics = fleet.cluster_topics(broker.cluster)
        self.route_frames = [route_template(fleet, topics[i % len(topics)]).render(i + 1)[4:] for i in range(CHUNK)]
        self.chunk(self.register_frames, BROKER)  # registers the broker

    def chunk(self, frames: list[bytes], channel: Channel) -> int:
        """Answer one received chunk as the reactor and an executor would; the answers' bytes."""
        replies, commands = self.processor.inline.answer_all(frames, channel, time.monotonic())
        size = sum(map(len, replies))
        for command in commands:
            size += len(encode_reply(channel, self.processor.process(command, channel)))
        return size


def rate(server: Server, frames: list[bytes], channel: Channel, seconds: float) -> float:
    """Requests answered per second for `seconds`."""
    done = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            server.chunk(frames, channel)
        done += 20 * len(frames)
    return done / (time.perf_counter() - started)


def compare(name: str, with_it: Callable[[], float], without: Callable[[], float], rounds: int) -> dict:
    """Legs with and without the cache, alternating: the medians and their ratio."""
    legs, _ = alternate(("with", "without"), rounds, lambda column: with_it() if column == "with" else without())
    rates = {column: median(legs[column]) for column in legs}
    return {"cache": name, "with_per_s": rates["with"], "without_per_s": rates["without"],
            "ratio": rates["with"] / rates["without"]}


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("cache-value", __doc__)
    parser.add_argument("--rounds", type=int, default=5,
                        help="legs with and legs without each cache, alternating (medians over them)")
    cli.add_seconds(parser, 0.5, "measured seconds per leg")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    fleet = FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0)
    leg = args.seconds
    say, results = Printed(), []
    say(f"per-request answers/s, median of {args.rounds} alternating legs of {leg} s")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for sub in ("all", "no-seen", "no-templates", "no-routes"):
            (root / sub).mkdir()
        full = Server(root / "all", fleet)
        no_seen = Server(root / "no-seen", fleet, seen_bytes=0)
        no_templates = Server(root / "no-templates", fleet, template_bytes=0)
        no_routes = Server(root / "no-routes", fleet, route_bytes=0)
        for name, a, b, frames, channel in (
                ("seen headers: route query", full, no_seen, "route_frames", CLIENT),
                ("seen headers: unchanged re-registration", full, no_seen, "register_frames", BROKER),
                ("registration answers: unchanged re-registration", full, no_templates, "register_frames", BROKER),
                ("route bodies: route query", full, no_routes, "route_frames", CLIENT)):
            results.append(compare(name, lambda a=a: rate(a, getattr(a, frames), channel, leg),
                                   lambda b=b: rate(b, getattr(b, frames), channel, leg), args.rounds))
            row = results[-1]
            say(f"{name:48s} with {row['with_per_s']:>10,.0f}/s  without {row['without_per_s']:>10,.0f}/s  "
                f"ratio {row['ratio']:5.2f}")
    write_results(cli.out_dir(args, "cache-value"), "cache-value", results, say)
    return 0

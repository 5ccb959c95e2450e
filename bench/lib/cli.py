"""The flags every verb shares, each meaning the same thing wherever it appears, and `-h`'s format.

    --namesrv HOST:PORT   a namesrv already running there (without it, a verb starts a fresh one,
                          or, where a server must be given, asks for --launch)
    --launch              start a fresh namesrv on a free 127.0.0.1 port for this run
    --server-set K=V      a configuration override of the namesrv this run starts (repeatable)
    --java off|auto|on    the Java NameServer 4.9.8 of ../shared beside namesrv in the same run
                          (auto: when Java 17 is present, else say why it was skipped)
    --out DIR             the directory this run writes: its meta.json (the run directory the Spark
                          report reads), or the run directories of its steps below it
    --seconds S           measured seconds (of a run, a step or a leg)

Every verb builds its parser with `parser(verb, doc)`; options whose absence means something say
so in their help and show no default (`HelpFormatter`).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.lib.servers import DEFAULT_JAVA_OPTS


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """ArgumentDefaultsHelpFormatter that appends "(default: ...)" only for real defaults (not None/False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def parser(verb: str, doc: str) -> argparse.ArgumentParser:
    """A verb's parser: `python -m bench VERB`, described by the first paragraph of its module's docstring."""
    return argparse.ArgumentParser(prog=f"python -m bench {verb}", description=doc.split("\n\n")[0],
                                   formatter_class=HelpFormatter)


def add_namesrv(parser: argparse.ArgumentParser, *, launch_flag: bool, names: tuple[str, ...] = ("--namesrv",),
                default: str | None = None) -> None:
    """--namesrv (and, where a server must be chosen, --launch) and --server-set.

    `launch_flag`: the verb targets `--namesrv` unless told --launch (the storm, the knee); without it
    the verb starts a fresh namesrv unless --namesrv names one.
    """
    if launch_flag:
        parser.add_argument(*names, dest="namesrv", default=default, metavar="HOST:PORT",
                            help="the NameServer to load (any RocketMQ-protocol one)")
        parser.add_argument("--launch", action="store_true",
                            help="start a fresh namesrv on a free 127.0.0.1 port for this run (ignores --namesrv)")
    else:
        parser.add_argument(*names, dest="namesrv", metavar="HOST:PORT",
                            help="a namesrv already running at this address (without it: a fresh one is started)")
    add_server_set(parser)


def add_server_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a configuration override of the namesrv this run starts (repeatable)")


def add_java(parser: argparse.ArgumentParser, default: str = "off", opts: str = DEFAULT_JAVA_OPTS) -> None:
    parser.add_argument("--java", choices=("off", "auto", "on"), default=default,
                        help="the Java NameServer 4.9.8 of ../shared beside namesrv in the same run (auto: only "
                        "when Java 17 is present, else say why it was skipped)")
    parser.add_argument("--java-opts", default=opts, help="JVM options for the Java NameServer")


def add_out(parser: argparse.ArgumentParser, *names: str) -> None:
    parser.add_argument("--out", *names, dest="out", type=Path,
                        help="the directory this run writes, read by `python -m bench report` (when absent: "
                        "runs/<verb>-<time>)")


def add_seconds(parser: argparse.ArgumentParser, default: float, what: str = "measured seconds",
                *names: str) -> None:
    parser.add_argument("--seconds", *names, dest="seconds", type=float, default=default, help=what)


def out_dir(args: argparse.Namespace, verb: str) -> Path:
    """--out, or runs/<verb>-<time>."""
    return args.out or Path("runs") / f"{verb}-{time.strftime('%Y%m%d-%H%M%S')}"


def parse_overrides(items: list[str]) -> dict[str, str]:
    """["key=value", ...] -> {key: value}; a missing "=" is a clear error."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--server-set {item!r} must be KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return overrides

"""`namesrv` / `python -m namesrv`: RocketMQ's mqnamesrv options, plus `--key=value` overrides.

Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT, at any point of the start too) or `-p`/`-h`;
2 for a usage error, an unknown key, a value that does not parse, an unreadable config file, a file
the server would write that cannot be written, or a port already in use — always as one line on
stderr naming the key, never a traceback. With serverWorkerProcesses
above 1 this process is the supervisor of the worker processes (namesrv.workers.supervisor).
"""
from __future__ import annotations

import argparse
import sys
import textwrap

from namesrv.config import ConfigError, NamesrvConfig, escape_property
from namesrv.controller import NamesrvController, validate
from namesrv.gc_pauses import freeze_before_serving
from namesrv.logsetup import DEFAULT_LOG_CONFIG, UsageError, setup_logging
from namesrv.remoting import BindError
from namesrv.state_files import check_state_files
from namesrv.stop_signals import StopSignals
from namesrv.workers.supervisor import Supervisor

USAGE_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="namesrv", allow_abbrev=False,
        description="A RocketMQ-compatible NameServer (remoting TCP plus a ZeroMQ msgpack endpoint).",
        epilog="Every configuration key can also be given as --key=value (camelCase, e.g. --listenPort=9876); "
               "it overrides the config file. conf/namesrv.properties lists every key with its default.")
    parser.add_argument("-c", "--configFile", metavar="FILE", help="Java properties file with configuration keys")
    parser.add_argument("-p", "--printConfigItem", action="store_true",
                        help="print the effective configuration (sorted key=value) and exit")
    parser.add_argument("--logConfig", metavar="FILE",
                        help=f"logging.config.fileConfig file (default: {DEFAULT_LOG_CONFIG} when present)")
    return parser


def parse_overrides(args: list[str]) -> dict[str, str]:
    """`--key=value` or `--key value` pairs; anything else is a usage error."""
    overrides: dict[str, str] = {}
    pending = list(args)
    while pending:
        arg = pending.pop(0)
        if not arg.startswith("--") or len(arg) == 2:
            raise UsageError(f"unexpected argument {arg!r} (configuration overrides are --key=value)")
        key, sep, value = arg[2:].partition("=")
        if not sep:
            if not pending or pending[0].startswith("--"):
                raise UsageError(f"{key}: missing value (use --{key}=value)")
            value = pending.pop(0)
        overrides[key] = value
    return overrides


def load_config(config_file: str | None, overrides: dict[str, str]) -> NamesrvConfig:
    try:
        return NamesrvConfig.load(config_file, overrides)
    except OSError as exc:
        raise UsageError(f"cannot read config file {config_file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read config file {config_file}: not UTF-8 ({exc.reason})") from None


def serve(config: NamesrvConfig) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    stops = StopSignals()
    stops.install()  # before start: a signal while booting still shuts down cleanly
    controller = NamesrvController(config)
    freeze_before_serving()
    controller.start()
    while stops.reason is None:
        stops.wait()
    controller.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    try:
        config = load_config(args.configFile, parse_overrides(rest))
        validate(config)  # -p prints only what the server would start with
        if args.printConfigItem:
            sys.stdout.write(config.to_text())
            return 0
        check_state_files(config)  # KV, snapshot and config files: refused now, not at their first write
        setup_logging(args.logConfig)
        if config.server_worker_processes > 1:
            return Supervisor(config, args.logConfig).run()
        serve(config)
    except (UsageError, ConfigError, BindError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    return 0


#: Keys whose default depends on the machine (home directory, environment): documented, left commented out.
MACHINE_DEFAULTS = {
    "rocketmqHome": "$ROCKETMQ_HOME",
    "kvConfigPath": "~/namesrv/kvConfig.json",
    "configStorePath": "~/namesrv/namesrv.properties",
}


def properties_template() -> str:
    """The text of conf/namesrv.properties: every key with its doc and default (a test keeps them equal)."""
    defaults = NamesrvConfig().to_properties()
    lines = ["# namesrv configuration: every key with its default (Java properties syntax).",
             "# Generated from namesrv.config.NamesrvConfig by namesrv.cli.properties_template().",
             "# Any key can also be overridden on the command line as --key=value.",
             "# Keys a running server may change (UPDATE_NAMESRV_CONFIG: namesrv-admin updateNamesrvConfig), written",
             "# back to the file it serves; every other key takes a restart:",
             *textwrap.wrap(", ".join(sorted(NamesrvConfig.remote_updatable())), 100, initial_indent="#   ",
                            subsequent_indent="#   "), ""]
    for key in NamesrvConfig.keys():
        lines.append(f"# {NamesrvConfig.doc(key)}")
        if key in MACHINE_DEFAULTS:
            lines += [f"# default: {MACHINE_DEFAULTS[key]}", f"#{key}="]
        else:
            lines.append(f"{key}={escape_property(defaults[key])}")
        lines.append("")
    return "\n".join(lines)

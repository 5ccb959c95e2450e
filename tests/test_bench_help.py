"""Every bench tool's `-h` describes every flag and shows its real defaults (issue 19, "clean edges").

Each tool's parser is taken from its own `main` (parse_args is replaced by one that hands the parser
back), so the check sees exactly what `-h` prints and nothing of the tool runs. The modules are
found by reading bench/, so a new tool is checked without being listed here.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
from pathlib import Path

import pytest

from bench.cli_help import HelpFormatter

BENCH = Path(__file__).resolve().parents[1] / "bench"
NO_COMMAND_LINE = {"codec_bench", "cli_help"}  # a pytest-benchmark file; the shared formatter


def command_line_modules() -> list[str]:
    """bench/*.py that build an argparse parser: the tools with a `-h`."""
    return sorted(path.stem for path in BENCH.glob("*.py")
                  if path.stem not in NO_COMMAND_LINE and "ArgumentParser(" in path.read_text(encoding="utf-8"))


class _Parsed(Exception):
    """Raised instead of parsing, carrying the parser the tool built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def tool_parser(name: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser `bench.<name>.main` builds, caught at its parse_args (before the tool does anything)."""
    module = importlib.import_module(f"bench.{name}")

    def hand_back(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", hand_back)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", hand_back)
    # An explicit argv: a main(argv=None) must not read pytest's own command line.
    call_args = [[]] if inspect.signature(module.main).parameters else []
    with pytest.raises(_Parsed) as parsed:
        module.main(*call_args)
    return parsed.value.parser


def meaningful_default(action: argparse.Action) -> bool:
    """A default worth showing: not absent (None, SUPPRESS), not an off flag, not an empty repeatable.

    An empty list (a repeatable option given no times) may be shown or not; it is not required.
    """
    default = action.default
    if default is None or default is argparse.SUPPRESS or default is False:
        return False
    return not (isinstance(default, (list, tuple)) and not default)


def squeezed(text: str) -> str:
    """`text` without whitespace: help lines wrap anywhere, even inside "register-same"."""
    return "".join(text.split())


def test_the_modules_are_found():
    found = command_line_modules()
    assert "throughput" in found and "ceiling" in found and "codec_bench" not in found


@pytest.mark.parametrize("name", command_line_modules())
def test_every_option_is_described_with_its_default(name: str, monkeypatch: pytest.MonkeyPatch):
    parser = tool_parser(name, monkeypatch)
    shown = squeezed(parser.format_help())
    assert isinstance(parser.description, str) and parser.description.strip(), f"bench.{name}: no description"
    problems = []
    expected: dict[str, list[str]] = {}
    for action in parser._actions:
        if action.dest == "help":
            continue
        label = "/".join(action.option_strings) or action.dest
        if not isinstance(action.help, str) or not action.help.strip() or action.help == argparse.SUPPRESS:
            problems.append(f"{label}: no help text")
        if meaningful_default(action):
            expected.setdefault(f"(default:{squeezed(str(action.default))})", []).append(label)
    for text, labels in expected.items():
        if shown.count(text) < len(labels):  # options sharing a default must each show it
            problems.append(f"{', '.join(labels)}: {text} not shown")
    if "(default:None)" in shown:
        problems.append("-h says (default: None)")
    assert not problems, f"bench.{name}: " + "; ".join(problems)


def test_the_formatter_shows_real_defaults_only():
    parser = argparse.ArgumentParser(prog="tool", formatter_class=HelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds")
    parser.add_argument("--json", metavar="FILE", help="also write JSON here (without it: printed only)")
    parser.add_argument("--quiet", action="store_true", help="no progress")
    parser.add_argument("--hidden", default=argparse.SUPPRESS, help="left out when absent")
    text = squeezed(parser.format_help())
    assert "measuredseconds(default:3.0)" in text
    assert text.count("(default:") == 1

"""One entry point, `python -m bench VERB`: every verb's `-h` describes every flag and shows its real
defaults (issue 19, "clean edges"), the shared flags mean the same everywhere, and the old command
lines are gone (issue 34) apart from the storm's.

Each verb's parser is taken from its own `main` (parse_args is replaced by one that hands the parser
back), so the check sees exactly what `-h` prints and nothing of the verb runs.
"""
from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import VERBS
from bench.lib.cli import HelpFormatter

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
#: The flags every verb shares, where it has them: the same help (bench/lib/cli.py) everywhere.
SHARED = ("--java", "--launch", "--out", "--seconds", "--namesrv")


class _Parsed(Exception):
    """Raised instead of parsing, carrying the parser the tool built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def tool_parser(verb: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser a verb's `main` builds, caught at its parse_args (before the verb does anything)."""
    module = importlib.import_module(VERBS[verb][0])

    def hand_back(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", hand_back)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", hand_back)
    with pytest.raises(_Parsed) as parsed:
        module.main([])  # an explicit argv: main must not read pytest's own command line
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


def test_every_module_with_a_main_is_a_verb_and_only_the_storm_keeps_a_command_line_of_its_own():
    verb_modules = {module for module, _ in VERBS.values()}
    for path in BENCH.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        text = path.read_text(encoding="utf-8")
        if "\ndef main(" in text:
            assert module in verb_modules or module == "bench.__main__", f"{module} has a main but no verb"
        if '__name__ == "__main__"' in text:
            assert module in ("bench.__main__", "bench.heartbeat_storm"), f"{module} is a command line of its own"


def test_python_m_bench_lists_the_verbs_and_refuses_an_unknown_one():
    listed = subprocess.run([sys.executable, "-m", "bench"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert listed.returncode == 2 and all(f"  {verb} " in listed.stdout for verb in VERBS)
    helped = subprocess.run([sys.executable, "-m", "bench", "--help"], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert helped.returncode == 0 and helped.stdout == listed.stdout
    unknown = subprocess.run([sys.executable, "-m", "bench", "saturation"], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)
    assert unknown.returncode == 2 and "unknown verb 'saturation'" in unknown.stderr
    verb = subprocess.run([sys.executable, "-m", "bench", "throughput", "-h"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert verb.returncode == 0 and verb.stdout.startswith("usage: python -m bench throughput")


@pytest.mark.parametrize("verb", VERBS)
def test_the_shared_flags_mean_the_same_everywhere(verb: str, monkeypatch: pytest.MonkeyPatch):
    parser = tool_parser(verb, monkeypatch)
    for action in parser._actions:
        for flag in set(action.option_strings) & set(SHARED):
            assert action.dest == flag.lstrip("-"), f"{verb} {flag} fills {action.dest}"
            if flag == "--java":
                assert action.choices == ("off", "auto", "on")
            if flag in ("--launch",):
                assert action.const is True and action.default is False


@pytest.mark.parametrize("verb", VERBS)
def test_every_option_is_described_with_its_default(verb: str, monkeypatch: pytest.MonkeyPatch):
    name = verb
    parser = tool_parser(verb, monkeypatch)
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

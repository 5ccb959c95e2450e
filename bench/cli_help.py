"""Help text shared by the bench command lines: every option shows its default, unless it has none.

argparse.ArgumentDefaultsHelpFormatter prints "(default: None)" for options whose absence means
something (e.g. "Spark's own master"), which tells the reader nothing; those options say in their
help what happens when they are absent, and this formatter leaves the default out.
"""
from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """ArgumentDefaultsHelpFormatter that appends "(default: ...)" only for real defaults (not None/False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)

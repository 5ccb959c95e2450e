"""Headless Chromium, driven the one way the tests do it: Debian's /usr/bin/chromium, run once per
page with a fresh profile, printing the DOM after the page's scripts ran (`--dump-dom`) or saving a
screenshot. A test that needs it skips, saying so, where it is not installed (.ci/run installs it)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
SKIP_REASON = "Debian's chromium is not installed (/usr/bin/chromium): apt-get install -y chromium"
#: Flags for a run as root in a container, with nothing fetched from anywhere but the page's own server.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-quic", "--no-first-run", "--enable-logging=stderr", "--v=0")


def available() -> bool:
    return CHROMIUM.exists()


def run(url: str, profile: Path, *flags: str, budget_ms: int = 2000, timeout: float = 120) -> subprocess.CompletedProcess:
    """One headless run of `url` with `flags` (e.g. `--dump-dom`, `--screenshot=FILE`), the page's timers
    run for `budget_ms` of virtual time; the profile is removed afterwards."""
    command = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *flags, url]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(result: subprocess.CompletedProcess) -> list[str]:
    """The page's uncaught script errors, as Chromium logged them."""
    return [line for line in result.stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]

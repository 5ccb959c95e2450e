"""Headless Chromium, driven the one way the project does it: the report's first screen and the tests'
pages (the Spark report, the status page).

Debian's /usr/bin/chromium, run once per page with a fresh profile, printing the DOM after the page's
scripts ran (`--dump-dom`) or saving a screenshot. The report is read in a browser; what fits on its
first screen is what a reader takes away, so the report verb keeps a screenshot of it beside
report.html (first-screen.png, at FIRST_SCREEN), and the tests read the laid-out page to check what is
on that screen. Without Chromium the screenshot is skipped and the caller says why; a test that needs
it skips with SKIP_REASON (.ci/run installs it).
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
SKIP_REASON = "Debian's chromium is not installed (/usr/bin/chromium): apt-get install -y chromium"
#: Flags for a run as root in a container, with nothing fetched from anywhere but the page's own server.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-quic", "--no-first-run", "--enable-logging=stderr", "--v=0")
#: The first screen: a laptop's browser window.
FIRST_SCREEN = (1400, 900)


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


def _window(page: Path, size: tuple[int, int], *flags: str) -> subprocess.CompletedProcess:
    """`page` in a window of `size`, without scroll bars; a failed run raises with Chromium's own words."""
    if not available():
        raise FileNotFoundError(SKIP_REASON)
    with tempfile.TemporaryDirectory(prefix="report-chromium-") as profile:
        result = run(page.resolve().as_uri(), Path(profile) / "profile", "--hide-scrollbars",
                     f"--window-size={size[0]},{size[1]}", *flags)
    if result.returncode:
        raise RuntimeError(f"chromium failed ({result.returncode}): {result.stderr[-2000:]}")
    return result


def screenshot(page: Path, png: Path, size: tuple[int, int] = FIRST_SCREEN) -> Path:
    """A PNG of what a browser window of `size` shows of `page` before scrolling."""
    _window(page, size, f"--screenshot={png.resolve()}")
    return png


def laid_out(page: Path, size: tuple[int, int] = FIRST_SCREEN) -> tuple[str, str]:
    """(the page's DOM once loaded and its scripts ran, the browser's console log on stderr)."""
    result = _window(page, size, "--dump-dom")
    return result.stdout, result.stderr

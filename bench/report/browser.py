"""Headless Chromium over a report: a screenshot of its first screen, and its page as the browser laid it out.

The report is read in a browser; what fits on its first screen is what a reader takes away, so the
report verb keeps a screenshot of it beside report.html (first-screen.png, at FIRST_SCREEN), and
the tests read the laid-out page (the DOM after load) to check what is on that screen. Debian's
`chromium` package; without it the screenshot is skipped and the caller says why.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

#: The first screen: a laptop's browser window.
FIRST_SCREEN = (1400, 900)


def chromium() -> str | None:
    """The Chromium binary, None when it is not installed."""
    return shutil.which("chromium") or (str(Path("/usr/bin/chromium")) if Path("/usr/bin/chromium").exists()
                                        else None)


def _run(page: Path, size: tuple[int, int], *args: str) -> subprocess.CompletedProcess:
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("Chromium is not installed (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="report-chromium-") as profile:
        command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run",
                   "--hide-scrollbars", "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
                   f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=2000", *args, page.resolve().as_uri()]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if result.returncode:
        raise RuntimeError(f"chromium failed ({result.returncode}): {result.stderr[-2000:]}")
    return result


def screenshot(page: Path, png: Path, size: tuple[int, int] = FIRST_SCREEN) -> Path:
    """A PNG of what a browser window of `size` shows of `page` before scrolling."""
    _run(page, size, f"--screenshot={png.resolve()}")
    return png


def laid_out(page: Path, size: tuple[int, int] = FIRST_SCREEN) -> tuple[str, str]:
    """(the page's DOM once loaded and its scripts ran, the browser's console log on stderr)."""
    result = _run(page, size, "--dump-dom")
    return result.stdout, result.stderr

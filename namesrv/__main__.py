"""`python -m namesrv` and the `namesrv` console script.

Signals come first: importing the server takes a few tenths of a second, and a SIGINT (Ctrl-C) or
SIGTERM meanwhile must end the process quietly, exit 0 (nothing was served yet), not with a
KeyboardInterrupt traceback. The process ends at once, from the handler: an exception raised into
whatever import or extension's initialisation is running can leave it half-done (a KeyboardInterrupt
there was seen to end in a segmentation fault). From the start of serving on, namesrv.stop_signals
shuts down gracefully.
"""
import os
import signal
import sys


def _stop_before_serving(signum: int, frame: object) -> None:
    os._exit(0)


def main() -> int:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop_before_serving)
    from namesrv.cli import main as cli_main  # the heavy imports, after the handlers
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())

"""`python -m namesrv`: the same as the `namesrv` console script."""
import sys

from namesrv.cli import main

sys.exit(main())

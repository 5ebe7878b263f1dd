"""`python -m collector ...` = `jobsight sidecar ...`."""
import sys

from collector.sidecar import main

sys.exit(main())

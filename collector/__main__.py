"""`python -m jobsight.collector ...` = `jobsight sidecar ...`."""
import sys

from .sidecar import main

sys.exit(main())

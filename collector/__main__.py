"""`python -m jobsight.collector ...` = `jobsight sidecar ...`."""
import os
import sys

from .isolate import restart_isolated

# prolog / epilog run as root: an isolated interpreter and a clean environment before the rest of
# the sidecar is imported (isolate.py); run from a checkout as `-m collector`, restart the plain file
restart_isolated(sys.argv[1:], ["-m", __package__] if __package__ == "jobsight.collector"
                 else [os.path.join(os.path.dirname(os.path.abspath(__file__)), "sidecar.py")])

from .sidecar import main  # noqa: E402

sys.exit(main())

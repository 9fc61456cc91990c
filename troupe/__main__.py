"""``python -m troupe``: the ``troupe`` command line (:mod:`troupe.cli`)."""

import sys

from troupe.cli import main

if __name__ == "__main__":
    sys.exit(main())

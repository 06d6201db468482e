"""`python -m tessel.cli`: the same as the `tessel` command."""

import sys

from tessel.cli import main

sys.exit(main())

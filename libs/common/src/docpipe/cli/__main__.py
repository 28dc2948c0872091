"""``python -m docpipe.cli`` is the ``docpipe`` command."""

import sys

from docpipe.cli import main

sys.exit(main())

"""``python -m meta.server -f server.ini``: see ``meta.server.main``."""

import sys

from meta.server.main import main

sys.exit(main())

"""``python -m meta.admin ...``: see ``meta.admin.main``."""

import sys

from meta.admin.main import main

sys.exit(main())

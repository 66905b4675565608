"""`python -m draft_training STAGE ...`: see `draft_training.cli`."""

import sys

from draft_training.cli import main

sys.exit(main(sys.argv[1:]))

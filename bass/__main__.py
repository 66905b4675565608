import sys

from bass.cli import main

sys.exit(main())

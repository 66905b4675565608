"""`python -m bass.models [NAME ...]`: prepare the embedded models (assemble, verify, dequantize, cache)."""

import sys

from bass.models.embedded import main

main(sys.argv[1:])

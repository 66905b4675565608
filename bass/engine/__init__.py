"""The engine: `Engine` (loading and the public API), `validate` (a request's arguments and memory),
`scheduler` (the line of requests and the device thread), `batch` (requests decoding together)."""

from bass.engine.engine import WARM_LENGTHS, Engine

__all__ = ["WARM_LENGTHS", "Engine"]

"""How often the Generate page sends a live update, so that drawing the run never slows the run down.

Every update costs this process CPU time the engine could use: the cards' HTML and the chart frames are built,
then Gradio serializes them and sends them over the websocket. On a GPU that time is spare (the engine waits on
the device), so updates go out every `GPU_INTERVAL_S`. On a small CPU the engine needs every core, so updates
go out at most every `CPU_INTERVAL_S`, and further apart whenever they cost more: with `c` the measured cost of
one update (from building the view until Gradio asks for the next one), the interval is at least `c / SHARE`, so
updates take at most `SHARE` of the wall clock. Phase changes, verdicts and the final view are not throttled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

GPU_INTERVAL_S = 0.25
# Measured on a 2-core CPU with the embedded model (scripts/page_overhead.py): every 2 s the page cost the engine
# about 5 % (every 1 s, about 14 %), the browser on the same machine included
CPU_INTERVAL_S = 2.0
STATUS_INTERVAL_S = 0.25  # an update of the status line alone (Compare's): a few hundred bytes, no chart to redraw
SHARE = 0.03  # of the wall clock that live updates may take on the server
SMOOTHING = 0.3  # weight of the newest cost in its running average


def min_interval_s(device) -> float:
    """The shortest interval between live updates on the engine's device (a torch.device or its name)."""
    kind = getattr(device, "type", str(device))
    return GPU_INTERVAL_S if kind == "cuda" else CPU_INTERVAL_S


@dataclass
class Throttle:
    """`due(now)`: whether a throttled update may go out; `sending()` ... `sent()` bracket each update sent."""

    min_interval_s: float
    share: float = SHARE
    cost_s: float = 0.0  # running average of one update's cost
    last_s: float = field(default=float("-inf"))  # when the last update went out
    _started: float | None = None

    @property
    def interval_s(self) -> float:
        return max(self.min_interval_s, self.cost_s / self.share)

    def due(self, now: float) -> bool:
        return now - self.last_s >= self.interval_s

    def sending(self) -> None:
        """An update is being built now (it is sent when the page's generator yields it)."""
        self._started = self.last_s = time.perf_counter()

    def sent(self) -> None:
        """Gradio asked for the next update: the previous one is built, serialized and sent."""
        if self._started is None:
            return
        cost = time.perf_counter() - self._started
        self.cost_s = cost if self.cost_s == 0.0 else (1 - SMOOTHING) * self.cost_s + SMOOTHING * cost
        self._started = None

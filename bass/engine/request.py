"""A request in line: its validated arguments, its event queue, what a batch tracks of it, and the line's side
that a batch sees (`Line`)."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

from bass.config import DraftLengthConfig, SamplingParams
from bass.drafters.base import Drafter
from bass.events import GenerationEvent

if TYPE_CHECKING:
    from bass.decode.sequences import RequestContext, Sequence


@dataclass(frozen=True)
class BatchKind:
    """What requests sharing a batch must share: one drafter, one verify rule, one attention backend."""

    method: str
    drafter: str | Drafter | None
    backend: str
    look_ahead: bool
    draft_length: DraftLengthConfig
    processing: SamplingParams  # temperature / top-k / top-p (`bass.decode.rules.processing`)


class RoundRecord(NamedTuple):
    """One round a request took part in, on its decode clock."""

    draft_length: int
    end_s: float  # when the round was read
    wait_s: float  # how long the host waited for the device in its synchronisation


@dataclass(eq=False)
class Request:
    """One call of `Engine.stream`: its validated arguments, its event queue, and what the batch tracks of it."""

    ids: list[list[int]]  # token ids of each prompt
    k: int
    params: SamplingParams
    kind: BatchKind
    bytes: int  # device memory it needs while it runs (`bass.engine.validate.request_bytes`)
    exclusive: bool = False
    cancel: threading.Event | None = None
    abandoned: threading.Event = field(default_factory=threading.Event)
    arrived: float = field(default_factory=time.perf_counter)
    events: queue.Queue = field(default_factory=queue.Queue)
    # set when it starts (`Batch.join`)
    seqs: list[Sequence] = field(default_factory=list)
    ctx: RequestContext | None = None
    prefill_s: float = 0.0
    rounds: list[RoundRecord] = field(default_factory=list)
    round_index: int = 0
    started_at: float | None = None
    # set with its result where nothing else runs or waits: the count of served batches once its batch has ended
    # (and captured what it queued); its stream ends only then, as a lone caller's next request expects
    settles_at: int | None = None

    @property
    def rows(self) -> int:
        return len(self.ids) * self.k

    @property
    def prompt_tokens(self) -> int:
        return sum(map(len, self.ids))

    def begin(self, seqs: list[Sequence], ctx: RequestContext, prefill_s: float) -> None:
        self.seqs, self.ctx, self.prefill_s = seqs, ctx, prefill_s

    def put(self, item: GenerationEvent | BaseException) -> None:
        self.events.put(item)


class Line(Protocol):
    """The line of requests as the device thread's batch sees it (`bass.engine.scheduler.Scheduler`)."""

    budget: int  # bytes the running requests may take together

    def head_if(self, fits) -> Request | None:
        """The request at the head of the line if `fits(request)` takes it."""

    def pop_if(self, fits) -> Request | None:
        """Take the request at the head of the line if `fits(request)` takes it."""

    def started(self, request: Request) -> None:
        """`request` begins its prefill."""

    def finished(self, request: Request) -> None:
        """`request` has its result."""

    def bytes_running(self) -> int:
        """Bytes the running requests take together."""

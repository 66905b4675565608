"""The one engine of this process, loaded once in the background, and the stop buttons' cancel events.

Loading runs in a thread so the page stays responsive: callbacks poll `EngineSession.state()` and show
its progress. Switching the model pair replaces the engine (the old one is dropped first, so two model
pairs never sit in memory together). Visitors' Generate requests reach the engine together (its scheduler
batches them); each browser session has its own cancel event, so a Stop ends that visitor's run only.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.settings import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, MAX_K
from bass.config import EngineConfig, SamplingParams
from bass.models.advice import on_space

if TYPE_CHECKING:
    from bass import Engine

log = logging.getLogger("bass.app")


@dataclass(frozen=True)
class ModelPair:
    """A target, and the draft model that speculates for it (None: the draft that ships for the target, if one
    does, else n-gram / layer-skip drafts)."""

    label: str
    target: str
    draft: str | None = None


EMBEDDED = ModelPair("Qwen2.5-Coder-1.5B-Instruct (embedded, offline)", "embedded")
SMALL = ModelPair("Gemma 3 270M (small & fast, offline)", "gemma3-270m")
HUB_PAIRS = (
    ModelPair("Qwen2.5-Coder-7B-Instruct ← 0.5B draft (hub)", "Qwen/Qwen2.5-Coder-7B-Instruct",
              "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    ModelPair("DeepSeek-Coder-6.7B-Instruct ← 1.3B draft (hub)", "deepseek-ai/deepseek-coder-6.7b-instruct",
              "deepseek-ai/deepseek-coder-1.3b-instruct"),
)


def configured_pair(env: Mapping[str, str]) -> ModelPair:
    """The pair named by BASS_TARGET / BASS_DRAFT (default: the embedded model)."""
    target = env.get("BASS_TARGET", "").strip() or "embedded"
    draft = env.get("BASS_DRAFT", "").strip() or None
    for known in (EMBEDDED, SMALL, *HUB_PAIRS):
        if (known.target, known.draft) == (target, draft):
            return known
    label = target + (f" ← {draft} draft" if draft else "") + " (BASS_TARGET)"
    return ModelPair(label, target, draft)


def model_pairs(default: ModelPair, gpu: bool, online: bool,
                installed: Callable[[str], bool] = lambda target: True) -> list[ModelPair]:
    """Pairs offered in the UI: the configured one first, the offline ones whose packages are `installed`
    (a Space installs requirements.txt, which holds the embedded model's only), hub pairs with a GPU and
    internet."""
    pairs = [default]
    offline = [p for p in (EMBEDDED, SMALL) if installed(p.target)]
    candidates = offline + (list(HUB_PAIRS) if gpu and online else [])
    pairs += [p for p in candidates if (p.target, p.draft) != (default.target, default.draft)]
    return pairs


def hub_reachable(timeout_s: float = 1.5) -> bool:
    """Whether the model hub answers; skipped (False) when the user asked for offline mode."""
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class LoadState:
    ready: bool
    loading: bool
    pair: ModelPair | None
    message: str
    fraction: float | None
    error: str | None
    note: str = ""  # a ready engine's caveat for the banner (its CUDA graphs could not be built at load)


EngineFactory = Callable[..., "Engine"]
WARM_PROMPT = 'def running_mean(xs: list[float]) -> list[float]:\n    """The mean of xs[:i + 1] for each i."""\n'


def _load_engine(config: EngineConfig, progress: Callable[[str, float], None]) -> Engine:
    # Imported here, not at module level: torch and the engine take seconds to import, and the page
    # should be up (showing the load's progress) before they are.
    from bass import Engine

    return Engine(config, progress=progress)


class EngineSession:
    """Holds at most one `Engine`; loads it lazily in a background thread with progress."""

    def __init__(self, env: Mapping[str, str] | None = None, factory: EngineFactory = _load_engine):
        env = os.environ if env is None else env
        self.default_pair = configured_pair(env)
        self.drafter = env.get("BASS_DRAFTER", "").strip() or None
        self.backend = env.get("BASS_BACKEND", "").strip() or None
        self.on_space = on_space(env)
        self._factory = factory
        self._lock = threading.Lock()
        self._engine: Engine | None = None
        self._pair: ModelPair | None = None
        self._loading: ModelPair | None = None
        self._message, self._fraction, self._error, self._note = "model not loaded yet", 0.0, None, ""
        self._cancels: dict[str, threading.Event] = {}
        self._logged: tuple[str, int | None] | None = None  # the last progress step written to the log

    # ---- loading ---------------------------------------------------------------------------------
    def config_for(self, pair: ModelPair) -> EngineConfig:
        # no configured draft: the one that ships for the target (the embedded target's trained draft), if any
        drafter = "model" if pair.draft else (self.drafter or "auto")
        kwargs = {"backend": self.backend} if self.backend else {}
        return EngineConfig(target=pair.target, draft=pair.draft or "auto", drafter=drafter, **kwargs)

    def ensure(self, pair: ModelPair | None = None) -> None:
        """Start loading `pair` (default: the configured one) unless it is loaded or loading already.

        Raises RuntimeError while another pair is still loading: two loads at once would need both
        models' memory.
        """
        pair = pair or self.default_pair
        with self._lock:
            if self._loading is not None:
                if self._loading == pair:
                    return
                raise RuntimeError(f"{self._loading.label} is still loading; wait for it, then switch models")
            if self._engine is not None and self._pair == pair:
                return
            self._engine, self._pair, self._error, self._note = None, None, None, ""  # free the old models first
            self._loading, self._message, self._fraction = pair, f"loading {pair.label}", 0.0
        threading.Thread(target=self._load, args=(pair,), name="bass-engine-load", daemon=True).start()

    def _progress(self, message: str, fraction: float | None) -> None:
        with self._lock:
            self._message = message
            self._fraction = None if fraction is None else max(0.0, min(1.0, float(fraction)))
        # the page shows every step; the log a line per stage and per tenth of it
        logged = (message, None if fraction is None else int(10 * fraction))
        if logged != self._logged:
            self._logged = logged
            log.info("model: %s%s", message, "" if fraction is None else f" ({fraction:.0%})")

    def _warm(self, engine: Engine) -> str:
        """On a GPU, build the decode graphs of every draft length at the largest k the page offers, with its
        default sampling (`Engine.warm_draft_lengths`; a smaller batch runs in a wider batch's graphs), so that
        a visitor's first runs do not: a graph captured inside a request stalls its round for tens of ms, and
        one with a kernel to compile for up to a second. The KV arena this sizes (`bass.runtime.cache.CacheArena`,
        rounded up to 256 positions) holds prompts of up to 256 tokens and up to 254 new ones, the page's
        default 128 among them; a larger request grows it, and the graphs are built again then.

        Returns the banner's note: "" when warmed (or nothing to warm), else why not. A warm-up that fails
        (out of memory at the largest k, say) costs the visitors nothing but the first runs' captures: the
        engine is kept and serves, building its graphs as requests need them."""
        if not getattr(engine, "captures_graphs", False):
            return ""
        self._progress("building the CUDA graphs of each draft length", None)
        try:
            engine.warm_draft_lengths(WARM_PROMPT, SamplingParams(temperature=DEFAULT_TEMPERATURE, top_p=DEFAULT_TOP_P),
                                      k=MAX_K, method="bass")
        except Exception as exc:  # the model is loaded and works: say so, and why its first runs may stall
            log.exception("warming the CUDA graphs failed")
            return (f"its CUDA graphs are built as runs need them (warming them at k = {MAX_K} failed: "
                    f"{type(exc).__name__}: {exc}), so first runs may pause")
        return ""

    def _load(self, pair: ModelPair) -> None:
        try:
            engine = self._factory(self.config_for(pair), progress=self._progress)
        except Exception as exc:  # shown to the user in the status box; the app stays up
            log.exception("loading %s failed", pair.label)
            with self._lock:
                self._loading, self._error = None, f"{type(exc).__name__}: {exc}"
            return
        note, ready = self._warm(engine), f"{pair.label} ready on {engine.device}"
        with self._lock:
            self._engine, self._pair, self._loading, self._note = engine, pair, None, note
            self._message, self._fraction = ready, 1.0
        log.info("model: %s", ready)  # the console's last load line said "deriving the draft (0%)" before

    def state(self) -> LoadState:
        with self._lock:
            return LoadState(ready=self._engine is not None, loading=self._loading is not None,
                             pair=self._pair or self._loading, message=self._message, fraction=self._fraction,
                             error=self._error, note=self._note)

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                raise RuntimeError("the model is not loaded yet")
            return self._engine

    def find_pair(self, label: str | None) -> ModelPair:
        """The pair whose label the dropdown shows (the default for None or an unknown label)."""
        for pair in (self.default_pair, EMBEDDED, SMALL, *HUB_PAIRS):
            if pair.label == label:
                return pair
        return self.default_pair

    def failure_hint(self) -> str:
        """What to do after a failed load, besides what its message says: where the details are."""
        log_place = "the Space's Logs tab" if self.on_space else "the server's log"
        return f"the message says what to do; {log_place} has the details; or choose another model pair"

    # ---- cancellation ----------------------------------------------------------------------------
    def new_cancel(self, key: str) -> threading.Event:
        """A fresh cancel event for the run of one browser session (replacing its previous one)."""
        event = threading.Event()
        with self._lock:
            self._cancels[key] = event
        return event

    def claim_cancel(self, key: str) -> threading.Event:
        """The cancel event registered for this browser session's run (`new_cancel`, made when Generate was
        clicked, before the run waited for a free slot), or a fresh one. A Stop pressed while the run waited
        has set it already: the run then ends before it starts."""
        with self._lock:
            event = self._cancels.get(key)
            if event is None:
                event = self._cancels[key] = threading.Event()
            return event

    def cancel(self, key: str) -> bool:
        """Signal the waiting or running generation of one browser session; False when none was."""
        with self._lock:
            event = self._cancels.get(key)
        if event is None or event.is_set():
            return False
        event.set()
        return True

    def release_cancel(self, key: str, event: threading.Event) -> None:
        with self._lock:
            if self._cancels.get(key) is event:
                del self._cancels[key]

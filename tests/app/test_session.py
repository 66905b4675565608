"""Model pairs from the environment, the single engine, cancel events."""

from __future__ import annotations

import threading
import time

import pytest
from app_fakes import FakeEngine

from app.session import EMBEDDED, HUB_PAIRS, SMALL, EngineSession, configured_pair, model_pairs


def test_configured_pair_from_env():
    assert configured_pair({}) == EMBEDDED
    assert configured_pair({"BASS_TARGET": "gemma3-270m"}) == SMALL
    custom = configured_pair({"BASS_TARGET": "org/big", "BASS_DRAFT": "org/small"})
    assert (custom.target, custom.draft) == ("org/big", "org/small") and "BASS_TARGET" in custom.label


def test_hub_pairs_only_with_gpu_and_internet():
    assert model_pairs(EMBEDDED, gpu=False, online=True) == [EMBEDDED, SMALL]
    assert model_pairs(SMALL, gpu=True, online=False) == [SMALL, EMBEDDED]
    assert model_pairs(EMBEDDED, gpu=True, online=True)[2:] == list(HUB_PAIRS)


def test_an_offline_model_whose_packages_are_missing_is_not_offered():
    """A Space installs requirements.txt, which holds the embedded model's packages and not the small one's."""
    only_embedded = lambda target: target == "embedded"  # noqa: E731
    assert model_pairs(EMBEDDED, gpu=False, online=False, installed=only_embedded) == [EMBEDDED]
    # the configured pair stays first even so: its load then fails with a message saying what to install
    assert model_pairs(SMALL, gpu=False, online=False, installed=only_embedded) == [SMALL, EMBEDDED]


def test_a_failed_load_points_to_the_log_where_the_reader_finds_it():
    assert "the Space's Logs tab" in EngineSession(env={"SPACE_ID": "someone/bass"}).failure_hint()
    assert "the server's log" in EngineSession(env={}).failure_hint()


def test_engine_config_for_pairs():
    session = EngineSession(env={"BASS_DRAFTER": "layer-skip", "BASS_BACKEND": "pad"})
    config = session.config_for(SMALL)
    assert (config.target, config.drafter, config.backend) == ("gemma3-270m", "layer-skip", "pad")
    assert session.config_for(HUB_PAIRS[0]).drafter == "model"


def wait_ready(session):
    for _ in range(300):
        if session.state().ready or session.state().error:
            return session.state()
        time.sleep(0.01)
    raise AssertionError("engine never loaded")


def test_one_engine_loaded_once_and_replaced_on_pair_change():
    made = []

    def factory(config, progress):
        made.append(config.target)
        return FakeEngine(config)

    session = EngineSession(env={}, factory=factory)
    session.ensure()
    wait_ready(session)
    session.ensure()
    session.ensure(EMBEDDED)
    assert made == ["embedded"]
    session.ensure(SMALL)
    state = wait_ready(session)
    assert made == ["embedded", "gemma3-270m"] and state.pair == SMALL
    assert session.engine.config.target == "gemma3-270m"


def test_the_server_log_says_when_the_model_is_ready(caplog):
    """Whoever started the app reads the console: its last load line must say the model serves, not a step of the
    load (it ended at "deriving the draft (0%)" while the page said ready)."""
    session = EngineSession(env={}, factory=lambda config, progress: FakeEngine(config))
    with caplog.at_level("INFO", logger="bass.app"):
        session.ensure()
        wait_ready(session)
        for _ in range(100):  # the log line follows the state the page reads
            if any("ready on" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.01)
    assert f"model: {EMBEDDED.label} ready on" in caplog.records[-1].getMessage()


def test_switching_while_loading_is_refused():
    gate = threading.Event()
    session = EngineSession(env={}, factory=lambda config, progress: (gate.wait(5), FakeEngine(config))[1])
    session.ensure(EMBEDDED)
    with pytest.raises(RuntimeError, match="still loading"):
        session.ensure(SMALL)
    with pytest.raises(RuntimeError, match="not loaded"):
        session.engine  # noqa: B018
    gate.set()
    wait_ready(session)


def test_cancel_registry():
    session = EngineSession(env={}, factory=FakeEngine)
    assert session.cancel("a") is False
    event = session.new_cancel("a")
    other = session.new_cancel("b")
    assert session.cancel("a") is True and event.is_set() and not other.is_set()
    assert session.cancel("a") is False  # already stopping
    session.release_cancel("a", event)
    assert session.cancel("a") is False


def test_find_pair_defaults():
    session = EngineSession(env={"BASS_TARGET": "gemma3-270m"})
    assert session.find_pair(None) == SMALL and session.find_pair(EMBEDDED.label) == EMBEDDED
    assert session.find_pair("nonsense") == SMALL


class GraphedFake(FakeEngine):
    """A fake engine that says it replays CUDA graphs, and records what it was asked to warm."""

    captures_graphs = True

    def __init__(self, config=None, progress=None):
        super().__init__(config, progress)
        self.warmed: list[tuple] = []

    def warm_draft_lengths(self, prompt, params, **kw):
        self.warmed.append((prompt, params, kw))


def test_a_gpu_engine_builds_its_graphs_at_the_largest_k_before_it_is_ready():
    """On a GPU the load warms every draft length at the page's largest k (smaller batches run in its graphs)
    with the page's default sampling, before the engine is handed out; a CPU engine is not warmed."""
    from app.settings import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, MAX_K

    messages = []
    session = EngineSession(env={}, factory=GraphedFake)
    session._progress = lambda message, fraction: messages.append(message)
    session.ensure()
    wait_ready(session)
    [(prompt, params, kw)] = session.engine.warmed
    assert kw == {"k": MAX_K, "method": "bass"} and prompt.startswith("def ")
    assert (params.temperature, params.top_p) == (DEFAULT_TEMPERATURE, DEFAULT_TOP_P)
    assert any("CUDA graphs" in m for m in messages)
    cpu = EngineSession(env={}, factory=FakeEngine)
    cpu.ensure()
    assert wait_ready(cpu).ready and not hasattr(cpu.engine, "warmed")


def test_a_failed_warm_up_keeps_the_loaded_engine_and_says_why():
    """Warming is an optimisation: if it fails (out of memory at the largest k, say) the engine still serves,
    and the banner says its first runs build their graphs, and why."""
    class Broken(GraphedFake):
        def warm_draft_lengths(self, prompt, params, **kw):
            raise RuntimeError("out of memory while capturing")

    session = EngineSession(env={}, factory=Broken)
    session.ensure()
    state = wait_ready(session)
    assert state.ready and state.error is None and isinstance(session.engine, Broken)
    assert "first runs may pause" in state.note and "out of memory while capturing" in state.note


def test_the_warm_up_note_goes_with_its_engine():
    """Another pair, warmed fine, replaces the engine and its caveat."""
    class Broken(GraphedFake):
        def warm_draft_lengths(self, prompt, params, **kw):
            raise RuntimeError("out of memory while capturing")

    session = EngineSession(env={}, factory=lambda config, progress: (
        Broken if config.target == "embedded" else GraphedFake)(config, progress))
    session.ensure(EMBEDDED)
    assert wait_ready(session).note
    session.ensure(SMALL)
    state = wait_ready(session)
    while state.pair != SMALL or not state.ready:
        time.sleep(0.01)
        state = session.state()
    assert state.note == "" and session.engine.warmed

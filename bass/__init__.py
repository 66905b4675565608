"""BASS: batched speculative decoding for code generation.

    from bass import Engine, EngineConfig, SamplingParams
    engine = Engine(EngineConfig(target="embedded"))
    result = engine.generate("def fib(n):", k=8, params=SamplingParams(max_new_tokens=128))
"""

from bass.config import HUMANEVAL_STOPS, DraftLengthConfig, EngineConfig, SamplingParams
from bass.engine import Engine
from bass.events import Candidate, GenerationEvent, GenerationResult, SequenceUpdate

__all__ = ["HUMANEVAL_STOPS", "Candidate", "DraftLengthConfig", "Engine", "EngineConfig", "GenerationEvent",
           "GenerationResult", "SamplingParams", "SequenceUpdate"]

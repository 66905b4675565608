"""Isolated, parallel execution of untrusted candidate programs against unit tests; HumanEval loader.

Imports nothing from `bass` or `app`: the app calls this package, never the other way.
"""

from sandbox.config import SandboxConfig
from sandbox.humaneval import Problem, load_humaneval, run_humaneval
from sandbox.outcome import Outcome, Status, TestFailure, rank_outcomes
from sandbox.runner import Job, run_candidates, run_jobs
from sandbox.service import SandboxService, SandboxServiceError, shared_service
from sandbox.splitter import split_tests

__all__ = ["Job", "Outcome", "Problem", "SandboxConfig", "SandboxService", "SandboxServiceError", "Status",
           "TestFailure", "load_humaneval", "rank_outcomes", "run_candidates", "run_humaneval", "run_jobs",
           "shared_service", "split_tests"]

"""Fake clocks and round drivers for the cost policy's tests (`test_cost_policy*.py`): costs from a formula
instead of the host clock, rounds read in order (as on the CPU) or a round ahead (as on CUDA)."""

from collections import deque

from bass.draft_length import DraftLengthPolicy
from bass.round_costs import RoundClock


def rounds(policy, seqs, n: int, accepted=lambda lengths: lengths) -> list[int]:
    """n rounds of `policy` over seqs, each accepting `accepted(lengths)`: the first sequence's lengths."""
    chosen = []
    for _ in range(n):
        lengths = policy.lengths(seqs)
        policy.update(seqs, accepted(lengths), lengths)
        chosen.append(lengths[0])
    return chosen


def geometric(rng, alpha, asked, supply=1.0):
    """Accepted count of one round: positions are proposed with prob `supply` each, accepted with `alpha`."""
    a = 0
    while a < asked and rng.random() < supply and rng.random() < alpha:
        a += 1
    return a


def by_position(rng, alphas, asked):
    """Accepted count of one round whose draft position i is accepted, once reached, with alphas[i]."""
    a = 0
    while a < asked and rng.random() < alphas[min(a, len(alphas) - 1)]:
        a += 1
    return a


class FakeClock(RoundClock):
    """Returns costs from a formula instead of measuring: c_verify(L) + L c_draft, L the length last asked."""

    def __init__(self, verify, draft):
        super().__init__()
        self.verify, self.draft, self.L = verify, draft, None
        self.policy = None

    def start(self):
        self.L = self.policy.last

    def stop(self):
        if self.L is None:
            return None
        L, self.L = self.L, None
        return self.verify(L) + L * self.draft


def make_policy(cfg, seqs, clock, **kw):
    policy = DraftLengthPolicy(cfg, seqs, clock=clock, **kw)
    clock.policy = policy
    return policy


class PipelinedClock(RoundClock):
    """Rounds decided and launched a round ahead, as on CUDA with look-ahead: a round's time runs from the
    round before it ended to its own end, and holds the host's launch of the round after it beside its own
    device work: max(device(L_r), launch(L_r, L_r+1))."""

    def __init__(self, device, launch):
        super().__init__()
        self.device, self.launch, self.policy = device, launch, None
        self.lengths: deque[int] = deque()

    def start(self):
        self.lengths.append(self.policy.last)

    def restart(self):
        pass

    def stop(self):
        L = self.lengths.popleft()
        return max(self.device(L), self.launch(L, self.lengths[0] if self.lengths else None))


def rounds_ahead(policy, seqs, n: int, accepted=lambda lengths: lengths) -> list[int]:
    """`rounds`, each round's length decided before the round before it is read."""
    chosen, pending = [], policy.lengths(seqs)
    for _ in range(n):
        after = policy.lengths(seqs)
        policy.update(seqs, accepted(pending), pending)
        chosen.append(pending[0])
        pending = after
    return chosen

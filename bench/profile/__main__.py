"""Diagnostics of the round: `python -m bench.profile {steps,host,ab} ...`."""

from bench.subcommands import dispatch

SUBCOMMANDS = {
    "steps": ("bench.profile.steps", "a forward, the sampling and a round, piece by piece, with profiler tables"),
    "host": ("bench.profile.host", "what launching each captured graph costs the host; the round's Python profile"),
    "ab": ("bench.profile.ab", "two real_bench runs side by side (the code before a change and after), new / old"),
}

if __name__ == "__main__":
    dispatch("profile", SUBCOMMANDS)

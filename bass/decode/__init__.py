"""Decoding: one round (`round`: plan, propose, verify, accept, emit), the loop that runs rounds back to back
(`pipeline`), the verify rule and its sampling (`verify`, `rules`, `sampling`, `streams`), the draft-length
policies (`draft_length`) and the per-sequence stop rule (`sequences`)."""

"""The training pipeline of the embedded target's draft (docs/draft.md). Imports `bass`; `bass` never imports it.

Stages (`python -m draft_training all` runs them in order; each can run alone):

  corpus       Python sources of the stdlib and installed packages -> token ids + code prompts (CPU)
  completions  the target's own sampled completions of those prompts (GPU)
  train        the draft, by plain next-token training and by distillation from the target (GPU)
  export       the better of the two -> the shipped file `bass/models/drafts/*.safetensors`

Every stage prints how long it took; the figures of the shipped run are kept in bench/results/.
"""

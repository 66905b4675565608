"""Session-wide settings, applied before any test module imports triton."""

import os

import torch

# Triton decides between compiling and interpreting when a kernel is decorated: on a machine with
# no GPU the kernels must run in the interpreter, so this has to happen before the first import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

"""What the decode loop runs on: the KV cache (`cache`), CUDA graphs of the decode and prefill forwards (`graphs`,
`prefill_graphs`), host-device copies that do not stall (`transfer`), attention backends (`attention`) and the
device (`device`)."""

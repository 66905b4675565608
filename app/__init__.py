"""The Gradio coding assistant: k live candidates, sandbox-ranked, with speed and acceptance charts.

UI only: it consumes `bass` (engine events) and `sandbox` (test outcomes) through their public APIs.
"""

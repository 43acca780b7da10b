# Two commands do all set-up on a fresh machine:
#   make serve   set up, build and serve the site at http://127.0.0.1:8000
#   make test    set up and run every test (unit, doc, parity, strict build, browser)
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup serve build test lint
setup: $(STAMP)

$(STAMP): pyproject.toml requirements/constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e '.[test,docs]'
	touch $(STAMP)

serve: setup
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

build: setup
	$(BIN)/mkdocs build --strict

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

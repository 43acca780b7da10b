# Two commands do all set-up on a fresh machine:
#   make serve   set up, build and serve the site at http://127.0.0.1:8000
#   make test    set up and run every test (unit, doc, parity, strict build, browser)
# and, for contributors (CONTRIBUTING.md says which for which change): make check (the consistency
# checkers alone, in seconds), make quick [FILES=...], make page PAGE=rope, make matrix, make compat.
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
# The second environment: every package at the pin but transformers (and what it needs newer),
# which is the newest release the registry serves, what `pip install transformers` gives a user
# today. make test runs the tests that import transformers in both (make compat: this one alone).
NEWEST       := .venv-newest
NEWEST_BIN   := $(NEWEST)/bin
NEWEST_STAMP := $(NEWEST)/.installed
# transformers and the packages a newer transformers may need newer: left out of the pin there
UNPINNED     := transformers|tokenizers|huggingface_hub|hf-xet|safetensors
# The site's math font (SIL Open Font License), installed from the npm registry, never committed.
# It is the source: the site serves a subset of it, cut at build time by mha_site/math_font.py.
FONT_PKG := @fontsource/noto-sans-math@5.3.0
FONTS    := docs/assets/fonts
FONT     := $(FONTS)/noto-sans-math.woff2
# axe-core (MPL-2.0), the accessibility checker tests/test_a11y.py runs in the browser; installed
# from the npm registry at set-up, never committed, never served with the site.
AXE_PKG := axe-core@4.14.1
AXE     := build/axe/axe.min.js
export NO_MKDOCS_2_WARNING := 1
# pip installs without compiling every module to bytecode (about 7,700 files, 20 s on one core);
# Python compiles the ones imported, once, on first import, which needs bytecode writing on.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup serve build test lint check screenshots
# The four installs side by side: pip's packages (the pinned set, and the newest transformers), and
# the two npm fetches that wait on the network.
setup:
	@$(MAKE) --no-print-directory -j4 $(STAMP) $(NEWEST_STAMP) $(FONT) $(AXE)

$(FONT):
	@command -v npm >/dev/null || { echo "npm (Node.js) is needed to fetch the math font $(FONT_PKG)"; exit 1; }
	rm -rf build/font.tmp && mkdir -p build/font.tmp
	cd build/font.tmp && npm pack --silent $(FONT_PKG) >/dev/null && tar xzf *.tgz
	mkdir -p $(FONTS)
	cp build/font.tmp/package/LICENSE $(FONTS)/LICENSE-noto-sans-math.txt
	cp build/font.tmp/package/files/noto-sans-math-latin-400-normal.woff2 $(FONT)
	rm -rf build/font.tmp

$(AXE):
	@command -v npm >/dev/null || { echo "npm (Node.js) is needed to fetch $(AXE_PKG)"; exit 1; }
	rm -rf build/axe.tmp && mkdir -p build/axe.tmp
	cd build/axe.tmp && npm pack --silent $(AXE_PKG) >/dev/null && tar xzf *.tgz
	mkdir -p $(dir $(AXE))
	cp build/axe.tmp/package/LICENSE $(dir $(AXE))LICENSE
	cp build/axe.tmp/package/axe.min.js $(AXE)
	rm -rf build/axe.tmp

$(STAMP): pyproject.toml requirements/constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -c requirements/constraints.txt -e '.[test,docs]'
	touch $(STAMP)

# Rebuilt when the pins change; `make compat` also upgrades its transformers when a newer one is out.
$(NEWEST_STAMP): pyproject.toml requirements/constraints.txt
	python3 -m venv $(NEWEST)
	$(NEWEST_BIN)/python -m pip install --quiet --upgrade pip
	grep -v -E '^($(UNPINNED))==' requirements/constraints.txt > $(NEWEST)/constraints.txt
	$(NEWEST_BIN)/python -m pip install --quiet --no-compile -c $(NEWEST)/constraints.txt \
	  -e '.[test,docs]' --upgrade transformers
	touch $(NEWEST_STAMP)

serve: setup
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

build: setup
	$(BIN)/mkdocs build --strict

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The consistency checkers (mha_site/checkers): shape comments, parity of the languages, glossary,
# markers ... The tests run them too; this is the quick way to see every problem at once.
check: setup
	$(BIN)/python -m mha_site.checkers

# Then the site's snippets and docstrings once more on one thread: the math library's summation
# order depends on the thread count (and on the machine's load), so a snippet that asserted
# rounding digits, not a bound, fails here even on the machine it was written on.
# The second run is also the newest transformers' (compat-run): the snippets and docstrings on one
# thread, beside the tests that import transformers (marked `transformers` by tests/conftest.py), also
# on one thread, one run on each core.
test: lint
	$(BIN)/python -m pytest
	@$(MAKE) --no-print-directory compat-run

# The tests that import transformers, and every snippet and docstring, in the newest transformers.
.PHONY: compat compat-run compat-docs compat-tests
compat: setup
	$(NEWEST_BIN)/python -m pip install --quiet --no-compile -c $(NEWEST)/constraints.txt \
	  --upgrade transformers
	@$(MAKE) --no-print-directory compat-run

compat-run:
	@$(BIN)/python -c "import transformers as t; print('transformers', t.__version__, '(the pin): the run above')"
	@$(NEWEST_BIN)/python -c "import transformers as t; print('transformers', t.__version__, '(the newest): the runs below')"
	@$(MAKE) --no-print-directory -j2 --output-sync=target compat-docs compat-tests

compat-docs:
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(NEWEST_BIN)/python -m pytest -q -p no:cacheprovider \
	  docs README.md mha

compat-tests:
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(NEWEST_BIN)/python -m pytest -q -p no:cacheprovider \
	  -m "transformers and not site and not browser" tests

# The contributor's loop: every test that needs no built site, no browser and is not slow (the
# site, the browsers, the quick benchmark and the fresh interpreters are make test's), or only
# FILES: make quick FILES="tests/test_full.py docs/en/rope.md docs/zh/rope.md".
.PHONY: quick
quick: setup
	$(BIN)/python -m pytest -q -m "not site and not browser and not slow" $(FILES)

# One page's checks, both languages: its snippets, the site's build (cached in build/site/ while
# docs/, mha/, mha_site/ and the configuration are unchanged) and every site and browser check of
# that page (pictures, axe in each state, search index, weight, runnable copies) with their
# premises: make page PAGE=rope, or PAGE="rope gqa". MHA_SITE=DIR checks a site built elsewhere.
.PHONY: page
page: setup
	@test -n "$(PAGE)" || { echo "make page PAGE=NAME: a page of docs/en/, as rope or rope.md"; exit 2; }
	$(BIN)/python -m pytest -q $(foreach p,$(PAGE),--page $(p))

# The whole combination matrix (tests/test_matrix.py): make test runs a sample of its cases.
.PHONY: matrix gpu-check
matrix: setup
	MHA_MATRIX=all $(BIN)/python -m pytest -q tests/test_matrix.py

# Where a GPU is (the device machine, whose own python3 holds a CUDA PyTorch; no set-up needed):
# the kernels' parity and the whole matrix on CUDA, then the benchmark's CUDA rows, within about
# 8 minutes. Without CUDA it says so and does nothing.
GPU_PYTHON ?= python3
gpu-check:
	@$(GPU_PYTHON) -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null || \
	  { echo "gpu-check: $(GPU_PYTHON)'s torch sees no CUDA device here (or it has no torch): nothing to check"; exit 0; } ; \
	set -e; \
	MHA_DEVICE=cuda MHA_MATRIX=all timeout 360 $(GPU_PYTHON) -m pytest --noconftest \
	  -p no:cacheprovider -q tests/test_cuda.py tests/test_matrix.py; \
	timeout 120 $(GPU_PYTHON) -m mha.bench --quick --device cuda --no-progress \
	  --out build/gpu-bench.json

# Not part of the test command: the browser tests again, writing screenshots/ for a reviewer's eyes.
screenshots: setup
	MHA_SCREENSHOTS=1 $(BIN)/python -m pytest -q -m browser

# The benchmark (10-20 minutes on 2 cores) measures again the file the performance page is drawn
# from; `python -m mha.bench` alone writes bench-results.json in the current folder.
.PHONY: bench
bench: setup
	$(BIN)/python -m mha.bench --out docs/assets/bench/results.json

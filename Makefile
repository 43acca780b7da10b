# Two commands do all set-up on a fresh machine:
#   make serve   set up, build and serve the site at http://127.0.0.1:8000
#   make test    set up and run every test (unit, doc, parity, strict build, browser)
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
# The site's math font (SIL Open Font License), installed from the npm registry, never committed.
FONT_PKG := @fontsource/noto-sans-math@5.3.0
FONTS    := docs/assets/fonts
FONT     := $(FONTS)/noto-sans-math.woff2
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup serve build test lint
setup: $(STAMP) $(FONT)

$(FONT):
	@command -v npm >/dev/null || { echo "npm (Node.js) is needed to fetch the math font $(FONT_PKG)"; exit 1; }
	rm -rf build/font.tmp && mkdir -p build/font.tmp
	cd build/font.tmp && npm pack --silent $(FONT_PKG) >/dev/null && tar xzf *.tgz
	mkdir -p $(FONTS)
	cp build/font.tmp/package/LICENSE $(FONTS)/LICENSE-noto-sans-math.txt
	cp build/font.tmp/package/files/noto-sans-math-latin-400-normal.woff2 $(FONT)
	rm -rf build/font.tmp

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

# kafkatw — the two commands the README documents are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SCHEMAS ?= ../shared/kafka-protocol
CONFIG ?= etc/server.properties

.PHONY: install compile run test codec bench bench-scale fuzz screenshots clean

$(STAMP): setup.cfg setup.py pyproject.toml kafkatw/protocol/_recwalk.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# Byte-compile the package (the generated codec is 2 MB of source): every broker start reads
# the .pyc instead of compiling, also where PYTHONDONTWRITEBYTECODE is set.
compile: $(STAMP)
	@$(BIN)/python -m compileall -q kafkatw

install: $(STAMP)

run: compile
	$(BIN)/twistd -n --pidfile= kafka --config $(CONFIG)

test: compile
	@$(BIN)/python tools/run_tests.py $(TESTS)

# The long forms of the fuzzers (docs/reliability.md): 200,000 random cases per decoder test,
# then a million mutated requests over the wire against a throwaway broker.
fuzz: compile
	KAFKATW_FUZZ_EXAMPLES=200000 $(BIN)/trial tests.test_fuzz_decoders
	$(BIN)/python -m tests.wire_fuzz --requests 1000000

# The console's pages at 1280x800 in headless Chromium (Debian's chromium, chromium-driver),
# written to docs/console/ for docs/console.md.
screenshots: compile
	$(BIN)/python -m tests.console_screenshots docs/console

codec:
	$(BIN)/python tools/gen_protocol.py $(SCHEMAS)/message kafkatw/protocol/messages
	$(BIN)/python tools/gen_protocol.py --records $(SCHEMAS)/coordinator-records kafkatw/protocol/coordinator_records.py
	$(BIN)/python tools/gen_errors.py $(SCHEMAS)/errors.tsv > kafkatw/protocol/errors.py

bench: $(STAMP)
	$(BIN)/python -m bench

# Issue 21: 1k/10k/50k partitions and 1k/10k connections on one broker (docs/performance.md)
bench-scale: compile
	$(BIN)/python -m bench.scale $(SCALE_ARGS)

clean:
	rm -rf $(VENV) _trial_temp* build *.egg-info

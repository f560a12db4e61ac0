# graphir developer tasks. Needs only python3 (>= 3.11) and make: everything else is installed
# into .venv from pyproject.toml (the `dev` extra) on first use.
#
#   make demo     build a GPT training step too big for one GPU, compare the placers on it, write the report pages
#   make test     lint, pytest (tests/unit; installs headless Chromium for the browser test when root) with typecheck beside it, and lit golden tests
#   make test-all `make test` plus the slow tests (big zoo models; pytest -m slow)
#   make zoo      build the model zoo into zoo/ and write benchmarks/results/zoo.md
#   make lint     ruff check + ruff format --check + the import-linter layering contracts (pyproject.toml)
#   make typecheck  pyright on graphir/, passes/, backends/ and driver/ ([tool.pyright] in pyproject.toml; strict on the IR core)
#   make format   ruff format + ruff check --fix
#   make bench    core benchmarks (devtools/bench_core.py) + placement tables (bench-place) + bench-scale
#   make bench-place  issue 15's placement tables: zoo training graphs x 3 presets x every placer and auto,
#                 mem-model=liveness and =paper (graphir-bench), checked in benchmarks/results/placement-check.md
#   make bench-parallelize  issue 37: the card's fuse,place and parallelize on the zoo's training graphs x 3
#                 presets against the placement table and the work bound (benchmarks/results/parallelize-check.md),
#                 parallelize{kernels=xla} on the three transformer graphs (matrix-kernels.toml, the check page's
#                 fused section), and parallelize on a 100k-node GPT training step (parallelize-scale.md;
#                 devtools/bench_parallelize.py)
#   make bench-scale  10k/100k/1M synthetic nodes through parse, fuse, place, simulate, print, and the ONNX and
#                 TF importers at 10k/100k: times, peak RSS and a log-log plot in benchmarks/results/scale.md
#                 (+ scale.png; devtools/bench_scale.py)
#   make bench-simulate  simulate on a 100k-node placed graph, every congestion rule and order (1 s budget)
#   make bench-fidelity  simulate vs measured median step on the 2-worker TF rig (2xcpu-workers; >= 5 models x 3
#                 placements), table + scatter plot in benchmarks/results/fidelity.md (+ .png); run on a quiet machine
#   make bench-online  graphir-tune (FastT's online loop) on a CNN, an LSTM and a GPT training graph on the 2-worker
#                 TF rig, >= 5 rounds each: rounds, decisions and plots in benchmarks/results/online.md (devtools/bench_online.py)
#   make regress  every placer on the zoo's training graphs and the onnx light models, checked byte for byte
#                 against benchmarks/results/regression.json (devtools/regress.py)
#   make fuzz     fuzz graphir-opt with mutated .gir/ONNX/GraphDef inputs for FUZZ_MINUTES (default 30), then the run
#                 paths (mutated small models executed; FUZZ_RUN_MINUTES, default 20); counts in
#                 benchmarks/results/fuzz.md, new crashes saved under tests/data/crashes/ (devtools/fuzz.py)
#   make replicate  the papers' headline comparisons on the zoo (devtools/replicate/, tables in benchmarks/results/)
#   make mutation  mutation testing (cosmic-ray) of the algorithmic core, module by module with each one's own
#                 tests; scores and survivors in benchmarks/results/mutation.md (slow: not part of `make test`;
#                 default: a seeded sample of 40 mutants a module; MUTATION_ARGS='--modules memory,heft
#                 --sample 80' narrows or widens it; devtools/mutation.py)
#   make clean    remove build and test artefacts (keeps .venv; `make distclean` removes it too)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-run the install of '.[dev,all]' only when pyproject.toml or the compiled module (setup.py,
# graphir/_girtext.c: the build compiles it into graphir/ at install) changes.
STAMP := $(VENV)/.installed-stamp
# The install runs uv's pip interface (uv itself comes from PyPI into the venv, by pip): the same
# resolution as `pip install -e '.[dev,all]'` (every version equal, compared with `pip freeze`), but
# wheels are fetched and unpacked in parallel and linked from uv's cache (~/.cache/uv), and
# --compile-bytecode compiles site-packages on every core (10.6k files: most of an install's time; pip
# compiles them one by one). Measured on the 2-core machine in fresh venvs, back to back at load 5-6 (nice 19):
# pip 512 s wall, 111 CPU s; uv (its own pip install included, warm cache) 71 s, 53 CPU s; with an empty
# cache uv took 118 s at load ~6. --reinstall-package graphir rebuilds the editable package (and the C
# module) every time, as pip does. uv reads its own settings (UV_INDEX_URL, uv.toml), not pip.conf; when
# uv cannot be installed, pip installs as before.
UV_VERSION := 0.13.9
# Folders that exist among these are linted (examples/ may hold no Python yet).
LINT_PATHS := $(wildcard graphir passes backends driver tools devtools tests examples)
FILECHECK_DIR := tests/filecheck

.DEFAULT_GOAL := help
.PHONY: help venv demo browser test test-all lint typecheck format bench bench-core bench-place bench-parallelize bench-scale bench-simulate bench-fidelity bench-online regress replicate zoo fuzz mutation clean distclean

help:
	@sed -n 's/^#   //p' Makefile

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml setup.py graphir/_girtext.c | $(BIN)/python
	if $(BIN)/python -m pip install -q 'uv==$(UV_VERSION)'; then \
		$(BIN)/uv pip install --python $(BIN)/python --compile-bytecode --reinstall-package graphir -e '.[dev,all]'; \
	else \
		$(BIN)/python -m pip install -e '.[dev,all]'; \
	fi
	touch $@

venv: $(STAMP)

# The point of the tool in one run (about a minute): build a GPT training step with TensorFlow
# (tools/demo.py; kept in build/demo/ once built), compare one device with the published placers on
# the four 1 GiB GPUs of examples/demo_cluster.toml (one device is out of memory), keep graphir's
# answer, and write the comparison (table, JSON, HTML) and the answer's report page under build/demo/;
# then parallelize (data x pipeline parallelism and op placement, judged by the simulator) and its
# report page under build/demo/parallel/.
DEMO_PLACERS := single,m-topo,m-etf,m-sct,heft,metis,order-place,adjusting,auto
demo: $(STAMP)
	$(BIN)/python -m graphir.tools.demo build/demo/gpt_train.pb
	$(BIN)/graphir-opt build/demo/gpt_train.pb --cluster=examples/demo_cluster.toml --passes=profile \
		--compare=$(DEMO_PLACERS) --emit=gir -o build/demo/gpt_placed.gir
	$(BIN)/graphir-opt build/demo/gpt_placed.gir --emit=compare -o build/demo/
	$(BIN)/graphir-opt build/demo/gpt_placed.gir --emit=report -o build/demo/
	@cat build/demo/compare.txt
	$(BIN)/graphir-opt build/demo/gpt_train.pb --cluster=examples/demo_cluster.toml --passes=parallelize --stats \
		--emit=report -o build/demo/parallel/ 2>&1 | grep -E '^parallelize\.(cand.*(sim|skipped)|chosen|makespan)'
	@echo "demo: open build/demo/compare.html (the placers side by side), build/demo/report.html (graphir's answer:"
	@echo "      timeline and memory) and build/demo/parallel/report.html (parallelize: data and pipeline parallelism)"

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/python -m devtools.importlint

# pyright cannot follow pyproject's package-dir mapping (passes/ installs as graphir.passes), so a
# folder of links gives it the installed shape: build/typecheck/graphir/{__init__.py,passes,backends,
# driver,tools} point at the sources, and [tool.pyright] checks passes/, backends/ and driver/ through
# them (one module name per file); its report names them by their source paths again. The pyright wheel of
# the dev extra carries pyright itself, and its [nodejs] extra a Node.js binary from PyPI.
TYPECHECK_STAGE := build/typecheck/graphir
# (One shell command, also run by `make test` beside pytest.)
TYPECHECK = mkdir -p $(TYPECHECK_STAGE) \
	&& ln -sfn ../../../graphir/__init__.py $(TYPECHECK_STAGE)/__init__.py \
	&& for package in passes backends driver tools; do ln -sfn ../../../$$package $(TYPECHECK_STAGE)/$$package; done \
	&& { PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(BIN)/pyright > build/typecheck/report.txt; status=$$?; \
		sed -E 's\#$(CURDIR)/$(TYPECHECK_STAGE)/(passes|backends|driver)/\#$(CURDIR)/\1/\#' build/typecheck/report.txt; \
		exit $$status; }
typecheck: $(STAMP)
	@$(TYPECHECK)

format: $(STAMP)
	$(BIN)/ruff format $(LINT_PATHS)
	$(BIN)/ruff check --fix $(LINT_PATHS)

# The browser test (tests/unit/test_browser.py) renders the report pages in headless Chromium. When
# no Chromium is on PATH and we are root, install Debian's package (about 1.5 minutes with the package
# lists present); otherwise the test skips with one line saying how to get it.
browser:
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			start=$$(date +%s); echo "browser: installing chromium for tests/unit/test_browser.py (apt-get)"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
				|| { apt-get update -q >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
				|| echo "browser: could not install chromium; the browser test will skip"; \
			echo "browser: chromium step took $$(( $$(date +%s) - start )) s"; \
		else \
			echo "browser: no chromium and not root: the browser test skips ('sudo apt-get install chromium' runs it)"; \
		fi; \
	fi

# lit runs graphir-opt and filecheck by name: put the venv's bin first on PATH (lit.cfg.py does
# the same for the test environment). lit fails when it finds no test at all, so an empty
# tests/filecheck is reported and skipped rather than failing the build.
# pytest runs on PYTEST_WORKERS processes (pytest-xdist; auto: one per core). --dist loadfile keeps a
# module's tests in one worker, so module-scoped fixtures (TF traces) are built once and a module's
# fixed paths (build/browser/, the fuzz canary) are never written by two workers at once; every worker
# has its own tmp_path, and the TF rig's servers bind free ports. PYTEST_WORKERS=0 runs in-process.
# --no-loadscope-reorder keeps the collection's module order, which conftest.py sets: the heaviest
# modules first (helpers.HEAVY_MODULES), so no TF module is left to run alone at the end.
# The budget is 8 minutes for all of `make test` on 2 cores (issue 38): the 15 slowest tests are listed
# at the end to keep it in view; what is slow moves to the slow suite with a fast check of the same property.
# Bytecode first: where PYTHONDONTWRITEBYTECODE is set (as on the shared 2-core machine) Python never
# caches the checkout's own modules, and each of pytest's processes (xdist workers, the tests'
# subprocesses, which inherit the variable; lit's RUN lines do not) compiled all of graphir again:
# 0.9 of a graphir-opt dce run's 1.5 CPU s. compileall writes the __pycache__ files regardless (gitignored; `make clean` removes them);
# the venv's own packages are compiled by pip at install.
# pyright (one process, about a minute) runs beside pytest rather than before it: its output is
# printed when pytest ends, and either one failing fails the target.
PYTEST_WORKERS ?= auto
test: lint browser
	$(BIN)/python -m compileall -q -j 0 $(LINT_PATHS)
	@mkdir -p build/typecheck
	@echo "typecheck: pyright runs beside pytest (output in build/typecheck/make.log, printed after pytest)"
	@( $(TYPECHECK) ) > build/typecheck/make.log 2>&1 & typecheck=$$!; \
		$(BIN)/python -m pytest -q -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15; \
		pytest_status=$$?; wait $$typecheck; typecheck_status=$$?; \
		echo "make typecheck:"; cat build/typecheck/make.log; \
		if [ $$typecheck_status != 0 ]; then echo "make typecheck failed (exit $$typecheck_status)"; fi; \
		[ $$pytest_status = 0 ] && [ $$typecheck_status = 0 ]
	@if [ -n "$$(find $(FILECHECK_DIR) -name '*.gir' -not -path '*/Output/*' 2>/dev/null | head -n 1)" ]; then \
		echo 'PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/lit -v $(FILECHECK_DIR)'; \
		PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/lit -v $(FILECHECK_DIR); \
	else \
		echo "lit: no .gir tests under $(FILECHECK_DIR) yet: skipping the golden tests"; \
	fi

# The slow tests (@pytest.mark.slow: they build the big zoo models, minutes each) are deselected by
# `make test` (-m "not slow") and run here.
test-all: test
	$(BIN)/python -m pytest -q -m slow

# Builds every missing zoo entry into zoo/ (GRAPHIR_ZOO_DIR moves it; 2 worker processes, one fresh
# process per entry), then imports each and rewrites the table; a run that built every entry also
# records its time there. `rm -rf zoo && make zoo` rebuilds from scratch (about 10 minutes, 2 cores).
zoo: $(STAMP)
	$(BIN)/python tools/zoo.py --table benchmarks/results/zoo.md

# cosmic-ray is installed here, not by `make venv` (the `mutation` extra). Each mutant runs its module's
# test selection in a copy of the tree under build/mutation/ (the checkout itself is never mutated).
MUTATION_ARGS ?= --sample 40 --seed 1
mutation: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[mutation]'
	nice -n 19 $(BIN)/python -m devtools.mutation $(MUTATION_ARGS)

bench: bench-core bench-place bench-parallelize bench-scale bench-simulate
	$(BIN)/python -m devtools.tf_onnx_cases --suite node -o benchmarks/results/tf_onnx_node.md

bench-core: $(STAMP)
	$(BIN)/python -m devtools.bench_core

# Issue 15's table: the zoo's 9 training graphs x the celeritas, pesto and fastt presets x every placer
# and place{algo=auto}, under mem-model=liveness and (the regression of placement.json) mem-model=paper,
# then the checks of auto (benchmarks/results/placement-check.md). benchmarks/matrix.toml (the Celeritas
# testbed alone, placement.md) is `graphir-bench --matrix benchmarks/matrix.toml`.
bench-place: $(STAMP)
	$(BIN)/graphir-bench --matrix benchmarks/matrix-liveness.toml
	$(BIN)/graphir-bench --matrix benchmarks/matrix-paper.toml
	$(BIN)/python -m devtools.placement_check benchmarks/results/placement-liveness.json \
		--regress benchmarks/results/placement.json benchmarks/results/placement-paper.json \
		--out benchmarks/results/placement-check.md

# The check exits 1 when a cell fails it; the page is written either way and the scale run goes on.
bench-parallelize: $(STAMP)
	$(BIN)/graphir-bench --matrix benchmarks/matrix-parallelize.toml
	$(BIN)/graphir-bench --matrix benchmarks/matrix-kernels.toml
	-$(BIN)/python -m devtools.parallelize_check benchmarks/results/parallelize.json \
		--table benchmarks/results/placement-liveness.json --kernels benchmarks/results/parallelize-kernels.json \
		--out benchmarks/results/parallelize-check.md
	$(BIN)/python -m devtools.bench_parallelize

# Synthetic inputs are written once to build/scale/ (the 1M-node file takes about a minute).
bench-scale: $(STAMP)
	$(BIN)/python -m devtools.bench_scale

# simulate on a 100k-node placed graph, every congestion rule and order (budget 1 s, issue 14).
bench-simulate: $(STAMP)
	$(BIN)/python -m devtools.bench_simulate --nodes 100000 --cluster fastt -o benchmarks/results/simulate.md

# Real TF worker processes pinned one per core: needs the cores to itself (check `uptime` first). Every pair in
# three interleaved rounds (--rounds 3): about 20-23 minutes.
# FIDELITY_ARGS=--calibrate recalibrates the rig's cached cluster description first.
bench-fidelity: $(STAMP)
	$(BIN)/python -m devtools.bench_fidelity $(FIDELITY_ARGS)

# Real TF worker processes pinned one per core, like bench-fidelity: needs the cores to itself. About 15-30 minutes.
bench-online: $(STAMP)
	$(BIN)/python -m devtools.bench_online $(ONLINE_ARGS)

# A restructuring must not change any answer: the printed module of every (model, placer) cell is
# compared by SHA-256 with the recorded run (`python -m devtools.regress --write FILE` records).
regress: $(STAMP)
	$(BIN)/python -m devtools.regress --check benchmarks/results/regression.json

# `make test` already runs a short seeded slice and every saved reproducer (tests/unit/test_fuzz.py,
# tests/unit/test_crashes.py); this is the long campaign. Exit status 1 when a crash or hang was found.
FUZZ_MINUTES ?= 30
# The run paths (the model executed: profile{mode=tf}, profile{mode=onnxruntime}, --run-tf on 2 logical
# CPUs), a second campaign with its own section of the page.
FUZZ_RUN_MINUTES ?= 20
FUZZ_SEED ?= 1
fuzz: $(STAMP)
	$(BIN)/python -m devtools.fuzz --minutes $(FUZZ_MINUTES) --seed $(FUZZ_SEED) --report benchmarks/results/fuzz.md
	$(BIN)/python -m devtools.fuzz --minutes $(FUZZ_RUN_MINUTES) --seed $(FUZZ_SEED) --kinds graphdef-run=1,onnx-run=1 \
		--report benchmarks/results/fuzz.md

# Celeritas, FastT, Pesto and Moirai's headline comparisons re-run on the zoo and the papers' cluster
# presets; rewrites benchmarks/results/replicate_*.md (under 60 minutes on 2 cores).
replicate: $(STAMP)
	$(BIN)/python -m devtools.replicate

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache .hypothesis
	find $(FILECHECK_DIR) \( -name Output -type d -o -name .lit_test_times.txt \) -prune -print0 | xargs -0 rm -rf
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV)

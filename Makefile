# Two commands on a fresh machine:  `make demo`  and  `make test`.
# Both install from requirements/*.lock (every package, transitive ones included, with hashes), so
# the demo runs on exactly the packages the suite passed with (docs/install.md).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# ONNX Runtime flavour: gpu where a CUDA GPU answers, else cpu (never both: same module name).
EXTRA  ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
LOCK       := requirements/$(EXTRA).lock
TEST_LOCK  := requirements/$(EXTRA)-test.lock
SERVE_LOCK := requirements/serve-binary.lock
# Where torch's CPU wheel comes from: this workplace keeps it on disk; elsewhere PyTorch's own index.
TORCH_INDEX ?= $(if $(wildcard /opt/wheels/torch-*),--find-links /opt/wheels,--extra-index-url https://download.pytorch.org/whl/cpu)
SAMPLES := sample_models/out
PIP    := $(PY) -m pip install --disable-pip-version-check -q
LOCKED := $(PIP) --no-deps --require-hashes $(TORCH_INDEX)

.PHONY: venv dev demo test test-slow samples clean lock check-latest lint

# A lock that changed makes a new venv: pip would leave packages the new lock dropped.
$(VENV)/.locked: $(LOCK)
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(LOCKED) -r $(LOCK)
	touch $@

# optcli itself, editable; again when pyproject.toml changes (its entry points), without a new venv.
$(VENV)/.installed: $(VENV)/.locked pyproject.toml
	$(PIP) --no-deps -e .
	touch $@

# The test lock holds every package of the runtime lock at the same version (tests/unit/test_lock.py),
# so installing it over the runtime set only adds the test tools.
# The serve binary (tests/integration/test_serve.py) goes in with --no-deps (see requirements/serve-binary.in);
# `-`: the wheel exists for Linux x86_64 (glibc 2.35+) only; elsewhere the serve tests skip with a reason.
$(VENV)/.dev-installed: $(VENV)/.installed $(TEST_LOCK) $(SERVE_LOCK)
	$(LOCKED) -r $(TEST_LOCK)
	-$(LOCKED) -r $(SERVE_LOCK)
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.dev-installed

$(SAMPLES)/.built: $(VENV)/.installed $(wildcard sample_models/*.py)
	$(PY) -m sample_models.build_all --out $(SAMPLES)
	touch $@

samples: $(SAMPLES)/.built

demo: samples
	$(VENV)/bin/optcli compile $(SAMPLES)/digits_cnn.pt2 --out optcli-out/digits_cnn
	$(VENV)/bin/optcli compile $(SAMPLES)/digits_cnn.pt2 --out optcli-out/digits_cnn-int8 --int8 \
		--calib calibration/digits_cnn/calib --eval calibration/digits_cnn/eval

# ruff and mypy at the lock's versions (pyproject.toml holds their settings).
lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The suite without the tests marked slow (minutes each: real exports of large configs, zoo compiles);
# `make test-slow` runs those, and CI runs both (.ci/run). The 25 slowest print at the end.
test: lint
	$(PY) -m pytest -q -m "not slow" --durations=25

test-slow: $(VENV)/.dev-installed
	$(PY) -m pytest -q -m slow --durations=25

# Regenerates every lock from pyproject.toml's ranges at the newest versions they allow
# (UPGRADE= keeps the current pins where they still fit). uv is pinned; it runs from its own venv.
UV_VERSION := 0.13.9
UV     := .venv-tools/bin/uv
UPGRADE ?= --upgrade
UV_COMPILE = $(UV) pip compile -q --generate-hashes --custom-compile-command "make lock" --python-version 3.11 $(UPGRADE)
MANYLINUX := --python-platform x86_64-manylinux_2_28
$(UV):
	$(PYTHON) -m venv .venv-tools
	.venv-tools/bin/pip install -q "uv==$(UV_VERSION)"

lock: $(UV)
	$(UV_COMPILE) $(MANYLINUX) $(TORCH_INDEX) pyproject.toml requirements/torch-cpu.in \
		--extra cpu --extra openvino --extra samples --extra test -o requirements/cpu-test.lock
	$(UV_COMPILE) $(MANYLINUX) $(TORCH_INDEX) pyproject.toml requirements/torch-cpu.in \
		--extra cpu --extra openvino --extra samples -c requirements/cpu-test.lock -o requirements/cpu.lock
	$(UV_COMPILE) $(MANYLINUX) pyproject.toml requirements/torch-cuda.in \
		--extra gpu --extra samples --extra test -o requirements/gpu-test.lock
	$(UV_COMPILE) $(MANYLINUX) pyproject.toml requirements/torch-cuda.in \
		--extra gpu --extra samples -c requirements/gpu-test.lock -o requirements/gpu.lock
	# The same pins without hashes, for `pip install ... -c` (pip takes no hashes in a constraints file).
	for f in cpu gpu; do sed -e '/--hash=/d' -e 's/ \\$$//' requirements/$$f.lock > requirements/$$f-constraints.txt; done
	# The serve wheel is built for glibc 2.35+ only.
	$(UV_COMPILE) --python-platform x86_64-manylinux_2_35 --no-deps requirements/serve-binary.in -o $(SERVE_LOCK)

# A throwaway venv from the newest versions pyproject.toml allows (what `pip install optcli` gets
# today), then the smoke test: one line, pass or fail, and which packages differ from the lock.
check-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	# torch stays at the lock's CPU build (a newer one from PyPI is a CUDA build of several GB): moving
	# torch is a deliberate step (docs/install.md); everything else goes to the newest its range allows.
	grep -E '^torch==' $(LOCK) | cut -d' ' -f1 > .venv-latest/torch.txt
	.venv-latest/bin/pip install -q --upgrade --upgrade-strategy eager -c .venv-latest/torch.txt $(TORCH_INDEX) \
		-e ".[cpu,openvino,samples]"
	.venv-latest/bin/python .ci/check_latest.py --lock $(LOCK) --venv .venv-latest

clean:
	rm -rf optcli-out $(SAMPLES) .pytest_cache .venv-latest

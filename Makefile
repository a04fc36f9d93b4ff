# Two commands on a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# ONNX Runtime flavour: gpu where a CUDA GPU answers, else cpu (never both: same module name).
EXTRA  ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
# The CPU build of torch; installing it first keeps the resolver from pulling CUDA wheels.
TORCH  ?= torch==2.13.0
# On a CPU, OpenVINO competes with ONNX Runtime in the build-cpu stage (docs/openvino.md).
comma := ,
RUNTIME_EXTRAS := $(EXTRA)$(if $(filter cpu,$(EXTRA)),$(comma)openvino)
SAMPLES := sample_models/out
PIP    := $(PY) -m pip install --disable-pip-version-check -q

.PHONY: venv dev demo test samples clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH)"
	$(PIP) -e ".[$(RUNTIME_EXTRAS),samples]"
	touch $@

# The serve extra's Triton binary (tests/integration/test_serve.py) without the wheel's numpy<2 pin, which
# is for PyTriton's Python package (never imported): the suite keeps the numpy it runs everywhere else.
# `-`: the wheel exists for Linux x86_64 (glibc 2.35+) only; elsewhere the serve tests skip with a reason.
SERVE_WHEEL := nvidia-pytriton==0.7.0

$(VENV)/.dev-installed: $(VENV)/.installed
	$(PIP) -e ".[$(RUNTIME_EXTRAS),samples,test]" "$(TORCH)"
	-$(PIP) --no-deps "$(SERVE_WHEEL)"
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

test: $(VENV)/.dev-installed
	$(PY) -m pytest -q

clean:
	rm -rf optcli-out $(SAMPLES) .pytest_cache

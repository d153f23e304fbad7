# The two commands: `make train` and `make test`. Both install what is missing first.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all bootstrap configure build loom test test-fast train classifier bench fuzz format clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

configure: bootstrap
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The `loom` binary alone: all that the main job needs (make build adds the tests and benchmarks).
loom: configure
	@cmake --build $(BUILD) -j $(JOBS) --target loom_cli

# Every test, once (labels: fast, slow, gpu, netns). Bootstrap's `test` adds the pinned Python
# environment the tests read Loom's files with. Ends with the slowest tests and the skipped ones.
test: build
	@bash scripts/bootstrap.sh test
	@bash scripts/run_tests.sh $(BUILD) $(JOBS)

# The edit-compile-test loop: the tests labelled fast (about 3 minutes on 2 cores).
test-fast: build
	@bash scripts/run_tests.sh $(BUILD) $(JOBS) -L '^fast$$'

# The main job, anew each time (--overwrite: an earlier run is moved aside, not deleted).
# Its evaluation uses the classifier shipped in assets/ (see docs/evaluation.md);
# `make classifier` trains that classifier again from configs/fmnist_classifier.toml.
train: loom
	@[ -f assets/fmnist_classifier/model.safetensors ] || $(MAKE) classifier
	OMP_NUM_THREADS=$(JOBS) $(BUILD)/loom train configs/dit_fmnist.toml --overwrite

classifier: loom
	OMP_NUM_THREADS=$(JOBS) $(BUILD)/loom train configs/fmnist_classifier.toml --overwrite \
	  --set run.out_dir=assets --set run.name=fmnist_classifier

bench: build
	@for b in $(BUILD)/*_bench; do echo "== $$b"; $$b; done
	@echo "== loom bench (training steps of the standard models, MFU)"; OMP_NUM_THREADS=$(JOBS) $(BUILD)/loom bench
	@echo "== bench/dist/overlap.sh"; bash bench/dist/overlap.sh $(BUILD)/loom
	@echo "== bench/checkpoint_overhead.sh"; bash bench/checkpoint_overhead.sh $(BUILD)/loom
	@echo "== pipeline_bubble (4 ranks)"; OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	  OMP_NUM_THREADS=1 mpirun --oversubscribe -np 4 $(BUILD)/pipeline_bubble

# libFuzzer with ASan + UBSan on the input readers (fuzz/): each target runs FUZZ_SECONDS.
# Inputs that fail are left in build-fuzz/findings/; copied into fuzz/regressions/<target>/
# they are replayed by `make test` from then on.
FUZZ_SECONDS ?= 60
fuzz:
	@bash scripts/bootstrap.sh fuzz
	@cmake -S . -B build-fuzz -DLOOM_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_BENCH=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@bash fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD) build-fuzz

# The two commands: `make train` and `make test`. Both install what is missing first.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all bootstrap build test train bench format clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

build: bootstrap
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

train: build
	OMP_NUM_THREADS=$(JOBS) $(BUILD)/loom train configs/dit_fmnist.toml

bench: build
	@for b in $(BUILD)/*_bench; do echo "== $$b"; $$b; done

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD)

# superfabric: the two commands of the README, and the steps they are made of.
#   make demo   set everything up, generate the default switch, run it on Verilator against the model
#   make test   set everything up, run the whole test suite on the model, Icarus and Verilator
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup simulators demo test bench clean

$(BIN)/superfabric: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

simulators:
	bash tools/install-simulators.sh

setup: $(BIN)/superfabric simulators

demo: setup
	$(BIN)/superfabric generate --preset default -o build/rtl
	$(BIN)/superfabric run --preset default --traffic uniform --load 0.9 --cycles 20000 --seed 1 --sim verilator -o build/run

test: setup
	$(BIN)/pytest -v

bench: setup
	$(BIN)/python -m superfabric.tools.bench

clean:
	rm -rf build

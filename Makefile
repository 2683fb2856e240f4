# superfabric: the two commands of the README, and the steps they are made of.
#   make demo   set everything up, generate the default switch, sweep it on the model and
#               Verilator (uniform and hotspot traffic, ten loads, two seeds), write the report;
#               then run the 8-endpoint RDMA all-reduce (1,024 QPs, 1 % drops) on Verilator
#               against the model, and report it
#   make test   set everything up, run the whole test suite on the model, Icarus and Verilator
#   make bench-synth   FPGA resources and Fmax of the default switch at 4, 8 and 16 ports on
#               ECP5 (Yosys, nextpnr) and Xilinx 7-series (Yosys), resumable; about an hour
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup simulators browser demo test bench bench-synth clean

$(BIN)/superfabric: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

simulators:
	bash tools/install-simulators.sh

# Headless Chromium renders the HTML reports in the tests.
browser:
	bash tools/install-browser.sh

setup: $(BIN)/superfabric simulators browser

demo: setup
	$(BIN)/superfabric generate --preset default -o build/rtl
	$(BIN)/superfabric sweep --preset default --traffic uniform,hotspot --loads 0.1:1.0:0.1 --seeds 2 --sim model,verilator --cycles 10000 -o build/sweep
	$(BIN)/superfabric report build/sweep -o build/report
	$(BIN)/superfabric run --preset default --set rdma.enabled=true --set rdma.qps=1024 --set faults.drop_rate=0.01 --traffic rdma-allreduce --sim verilator -o build/rdma
	$(BIN)/superfabric report build/rdma -o build/rdma-report

test: setup
	$(BIN)/pytest -v

# AGAINST=REV also runs the golden model of commit REV side by side with this one;
# DCQCN=DIR runs only the congestion-control table (README, DCQCN), its runs kept in DIR.
bench: setup
	$(BIN)/python -m superfabric.tools.bench $(if $(AGAINST),--against $(AGAINST)) $(if $(DCQCN),--dcqcn $(DCQCN))

# Only the venv: the FPGA tools come with it (yowasp-* on PyPI).
bench-synth: $(BIN)/superfabric
	$(BIN)/python -m superfabric.tools.bench_synth

clean:
	rm -rf build

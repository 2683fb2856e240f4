# superfabric: the two commands of the README, and the steps they are made of.
#   make demo   set everything up, generate the default switch, sweep it on the model and
#               Verilator (uniform and hotspot traffic, ten loads, two seeds), write the report;
#               then run the 8-endpoint RDMA all-reduce (1,024 QPs, 1 % drops) on Verilator
#               against the model, write its packets as RoCEv2 frames (build/rdma.pcap) and
#               report it; then sweep the 64-endpoint 4x4x4 torus on the
#               model (dor against adaptive routing, uniform and tornado traffic) and report it
#   make test   set everything up, run the whole test suite on the model, Icarus and Verilator
#   make test-fast   the model and Amaranth-simulator tests alone, no RTL simulator, no FPGA
#               tool: a few minutes
#   make bench-synth   FPGA resources and Fmax of the default switch at 4, 8 and 16 ports on
#               ECP5 (Yosys, nextpnr) and Xilinx 7-series (Yosys), resumable, written into
#               docs/results/switch-synth.md (make bench TABLES=switch-synth); about an hour
#   make fuzz   a large random-configuration campaign: RTL against the model on each case
#   make coverage  line and toggle coverage of the switch and RDMA RTL under Verilator
#   make bench  simulation speed and measured figures, written into docs/results/
#   make docs   the documentation site, build/docs/html/index.html
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup simulators debian-tools demo test test-fast bench bench-synth fuzz coverage docs clean

$(BIN)/superfabric: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

simulators:
	bash tools/install-simulators.sh

# Headless Chromium renders the HTML reports in the tests; tshark, Wireshark's decoder,
# reads back the pcap files of `superfabric pcap`; dfu-suffix (dfu-util) ends the
# OrangeCrab's bitstream build of `superfabric board`.
debian-tools:
	bash tools/install-debian-tools.sh

setup: $(BIN)/superfabric simulators debian-tools

demo: setup
	$(BIN)/superfabric generate --preset default -o build/rtl
	$(BIN)/superfabric sweep --preset default --traffic uniform,hotspot --loads 0.1:1.0:0.1 --seeds 2 --sim model,verilator --cycles 10000 -o build/sweep
	$(BIN)/superfabric report build/sweep -o build/report
	$(BIN)/superfabric run --preset default --set rdma.enabled=true --set rdma.qps=1024 --set faults.drop_rate=0.01 --traffic rdma-allreduce --sim verilator -o build/rdma --pcap build/rdma.pcap
	$(BIN)/superfabric report build/rdma -o build/rdma-report
	$(BIN)/superfabric sweep --preset default --set switch.priorities=1 --set fabric.topology=torus --set fabric.vcs=4 --vary fabric.routing=dor,adaptive --traffic uniform,tornado --loads 0.1:1.0:0.1 --seeds 1 --sim model --cycles 5000 -o build/fabric-sweep
	$(BIN)/superfabric report build/fabric-sweep -o build/fabric-report

# The test layers are pytest markers (pyproject.toml): `rtl` needs Icarus or Verilator (the
# cocotb runs, RTL builds and lints; tests/conftest.py marks them), `slow` takes over about
# 30 s (one test, or a parametrised test's cases together), `synth` runs the FPGA tools,
# `docs` runs the commands the README and docs/ show, and `bench` is a full-size fabric
# whose behaviour a smaller case in `make test` covers too: `make bench` runs those.
# `make test` runs every layer but bench; `make test-fast` only what needs neither an RTL
# simulator nor the FPGA tools, nor is slow or docs: the golden model, the Amaranth
# simulator's block tests, the oracles and the command line on the model.
# Both run one pytest worker per core (pytest-xdist), a test file to a worker: the tests of
# one file share its RTL builds, and a build another worker needs too is made once (the
# runner locks it). Most of a run is single-threaded Python (the model, cocotb, Icarus).
PARALLEL := -n auto --dist loadfile
test: setup
	$(BIN)/pytest -v $(PARALLEL) -m "not bench"

test-fast: $(BIN)/superfabric debian-tools
	$(BIN)/pytest $(PARALLEL) -m "not rtl and not slow and not synth and not docs and not bench"

# Every table is printed and written as a page of docs/results/ (stamped with date, commit
# and machine). TABLES="model fabric" runs only those (model, fabric, scale, trace, rdma,
# rdma-hops, rdma-state, rdma-fabrics, stimulus, fabric-stimulus, rdma-hosted, pool,
# compression, board, tornado, blocks, fpga-fabric, switch-synth, collective-latency,
# collective-sweep, collective-sweep-384, scheduling; all by default, collective-sweep-384 for
# about five hours);
# AGAINST=REV also runs the golden model of commit REV side by side with this one;
# DCQCN=DIR runs only the congestion-control table, its runs kept in DIR; PEERS=DIR names
# the folder of BookSim2 for the scale and scheduling tables (default ../shared/peers
# beside the repository, when there).
TABLES ?=
bench: setup
	$(if $(DCQCN)$(TABLES),,$(BIN)/pytest -v -m bench)
	$(BIN)/python -m superfabric.tools.bench $(TABLES) $(if $(AGAINST),--against $(AGAINST)) $(if $(DCQCN),--dcqcn $(DCQCN)) $(if $(PEERS),--peers $(PEERS))

# Only the venv: the FPGA tools come with it (yowasp-* on PyPI).
bench-synth: $(BIN)/superfabric
	$(BIN)/python -m superfabric.tools.bench switch-synth

# FUZZ_CONFIGS cases of seed FUZZ_SEED on FUZZ_SIM (model, icarus or verilator); every RTL
# case is a build of its own, about a minute each on 2 cores.
FUZZ_CONFIGS ?= 100
FUZZ_SEED    ?= 1
FUZZ_SIM     ?= verilator
fuzz: setup
	$(BIN)/superfabric fuzz --configs $(FUZZ_CONFIGS) --seed $(FUZZ_SEED) --sim $(FUZZ_SIM) -o build/fuzz-$(FUZZ_SIM)-$(FUZZ_SEED)

# The Verilator RTL tests of the switch and the RDMA fabric on coverage builds (a build key
# of their own), then their data merged, annotated and counted per block in build/coverage.
COVERAGE_TESTS := tests/test_switch_rtl.py tests/test_ecn.py tests/test_pfc.py \
                  tests/test_skid_buffer.py tests/rdma/test_rtl.py tests/test_fuzz.py
coverage: setup
	rm -rf build/coverage
	SUPERFABRIC_COVERAGE=$(CURDIR)/build/coverage/runs $(BIN)/pytest -q -k "not icarus" $(COVERAGE_TESTS)
	$(BIN)/python -m superfabric.tools.coverage build/coverage/runs -o build/coverage

# The documentation site (Sphinx, Markdown pages through myst-parser), warnings as errors.
docs: $(BIN)/superfabric
	$(BIN)/sphinx-build -W --keep-going -b html docs build/docs/html

clean:
	rm -rf build

// The stimulus top under a plain Verilator harness: no VPI, no Python, nothing per cycle
// but the two evaluations of a clock period. The benchmark (tools/bench.py) runs it beside
// the cocotb run of the same Verilog, built with the same Verilator flags.
//
// usage: harness WRITES READS
//   WRITES  lines "address value": the configuration writes of the run, in order
//   READS   lines "address": the statistics words to read back after the run
// Resets for three cycles, writes the configuration one word per cycle, arms the run,
// clocks until `done`, reads every word back, and prints one JSON object:
//   {"cycles": C, "run_seconds": S, "words": [w0, w1, ...]}
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <vector>

#include "Vstimulus.h"
#include "verilated.h"

static std::vector<std::vector<uint64_t>> read_rows(const char *path, int columns) {
    std::vector<std::vector<uint64_t>> rows;
    FILE *f = std::fopen(path, "r");
    if (!f) {
        std::perror(path);
        std::exit(2);
    }
    uint64_t a = 0, b = 0;
    while ((columns == 2 ? std::fscanf(f, "%" SCNu64 " %" SCNu64, &a, &b)
                         : std::fscanf(f, "%" SCNu64, &a)) == columns)
        rows.push_back(columns == 2 ? std::vector<uint64_t>{a, b} : std::vector<uint64_t>{a});
    std::fclose(f);
    return rows;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s WRITES READS\n", argv[0]);
        return 2;
    }
    const auto writes = read_rows(argv[1], 2);
    const auto reads = read_rows(argv[2], 1);
    auto context = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<Vstimulus>(context.get());
    // One clock period: inputs set before it are taken at its rising edge.
    auto tick = [&] {
        top->clk = 0;
        top->eval();
        top->clk = 1;
        top->eval();
    };
    top->rst = 1;
    top->csr_we = 0;
    for (int k = 0; k < 3; k++) tick();
    top->rst = 0;
    for (const auto &w : writes) {
        top->csr_addr = w[0];
        top->csr_wdata = w[1];
        top->csr_we = 1;
        tick();
    }
    top->csr_addr = 0;  // control
    top->csr_wdata = 1;
    tick();
    top->csr_we = 0;

    const auto t0 = std::chrono::steady_clock::now();
    while (!top->done) tick();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::printf("{\"cycles\": %" PRIu64 ", \"run_seconds\": %.6f, \"words\": [",
                static_cast<uint64_t>(top->cycle), seconds);
    for (size_t k = 0; k < reads.size(); k++) {
        top->csr_addr = reads[k][0];  // registered, then read: two cycles
        tick();
        tick();
        std::printf("%s%" PRIu64, k ? ", " : "", static_cast<uint64_t>(top->csr_rdata));
    }
    std::printf("]}\n");
    top->final();
    return 0;
}

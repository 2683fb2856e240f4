// The stimulus top under a plain Verilator harness: no VPI, no Python, nothing per cycle
// but the two evaluations of a clock period. The benchmark (tools/bench.py) runs it beside
// the cocotb run of the same Verilog, built with the same Verilator flags.
//
// usage: harness WRITES READS
//   WRITES  lines "address value": the configuration writes of the run, in order
//   READS   lines "address": the first addresses of the blocks to read back after the run
// Resets for three cycles, writes the configuration one word per cycle, arms the run,
// clocks until `done`, reads the blocks back, one per cycle, and prints one JSON object:
//   {"cycles": C, "run_seconds": S, "readout_seconds": R, "readout_words": B,
//    "words": [w0, w1, ...]}
// with the B words of every block (the top's readout_words, from csr_rdata's width) in turn.
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

// Word j of csr_rdata: Verilator holds a port of 33 to 64 bits as one 64-bit integer, a wider
// one as 32-bit words.
static uint64_t word(QData data, size_t) { return data; }
template <std::size_t N>
static uint64_t word(const VlWide<N> &data, size_t j) {
    return data[2 * j] | static_cast<uint64_t>(data[2 * j + 1]) << 32;
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

    using clock = std::chrono::steady_clock;
    auto since = [](clock::time_point t) {
        return std::chrono::duration<double>(clock::now() - t).count();
    };
    const auto t0 = clock::now();
    while (!top->done) tick();
    const double seconds = since(t0);

    // The address is registered at one edge, its block at the next: a block per cycle.
    const size_t size = sizeof(top->csr_rdata) / sizeof(uint64_t);
    std::vector<uint64_t> words;
    const auto t1 = clock::now();
    for (size_t k = 0; k <= reads.size(); k++) {
        if (k < reads.size()) top->csr_addr = reads[k][0];
        tick();
        if (k)
            for (size_t j = 0; j < size; j++) words.push_back(word(top->csr_rdata, j));
    }
    const double readout = since(t1);

    std::printf("{\"cycles\": %" PRIu64 ", \"run_seconds\": %.6f, \"readout_seconds\": %.6f, "
                "\"readout_words\": %zu, \"words\": [",
                static_cast<uint64_t>(top->cycle), seconds, readout, size);
    for (size_t k = 0; k < words.size(); k++)
        std::printf("%s%" PRIu64, k ? ", " : "", words[k]);
    std::printf("]}\n");
    top->final();
    return 0;
}

// The hardware-hosted RDMA top (rdma_hosted) under a plain Verilator harness: no VPI, no
// Python, nothing per cycle but the two evaluations of a clock period. The benchmark
// (tools/bench.py) runs it beside the cocotb run of the same Verilog, built with the same
// Verilator flags, on the same script (superfabric/tb/rdma/script.py).
//
// usage: rdma_harness SCRIPT LIMIT
//   SCRIPT  one line per cycle, "name=hex ..." for each input it sets (inputs keep their
//           values), and one line "wait": there the run goes on until `done` or LIMIT cycles
// Resets for three cycles, plays the lines before "wait" a cycle each, clocks until `done`,
// reads the run's outputs, plays the lines after "wait" (the host memories' sweep), reads
// the hashes, and prints one JSON object:
//   {"finished": F, "cycles": C, "run_seconds": S, "counters": [...], "hashes": [...]}
// counters and hashes as the ports' 32-bit words, lowest first.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "Vrdma_hosted.h"
#include "verilated.h"

using Words = std::vector<uint32_t>;

// A value of any width, as 32-bit words, lowest first.
static Words parse_hex(const std::string &hex) {
    Words words;
    for (size_t end = hex.size(); end > 0; end = end > 8 ? end - 8 : 0) {
        const size_t begin = end > 8 ? end - 8 : 0;
        const std::string digits = hex.substr(begin, end - begin);
        words.push_back(static_cast<uint32_t>(std::stoul(digits, nullptr, 16)));
    }
    return words;
}

// Verilator holds a port of up to 64 bits as an integer, a wider one as 32-bit words.
template <typename T>
static void assign(T &port, const Words &w) {
    uint64_t v = w.empty() ? 0 : w[0];
    if (w.size() > 1) v |= static_cast<uint64_t>(w[1]) << 32;
    port = static_cast<T>(v);
}
template <std::size_t N>
static void assign(VlWide<N> &port, const Words &w) {
    for (size_t i = 0; i < N; i++) port[i] = i < w.size() ? w[i] : 0;
}
template <typename T>
static Words words(const T &port) {
    const uint64_t v = port;
    return sizeof(T) > 4 ? Words{static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32)}
                         : Words{static_cast<uint32_t>(v)};
}
template <std::size_t N>
static Words words(const VlWide<N> &port) {
    return Words(port.data(), port.data() + N);
}

static void print_words(const char *name, const Words &w) {
    std::printf(", \"%s\": [", name);
    for (size_t k = 0; k < w.size(); k++) std::printf("%s%" PRIu32, k ? ", " : "", w[k]);
    std::printf("]");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s SCRIPT LIMIT\n", argv[0]);
        return 2;
    }
    std::ifstream script(argv[1]);
    if (!script) {
        std::perror(argv[1]);
        return 2;
    }
    const uint64_t limit = std::stoull(argv[2]);
    auto context = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<Vrdma_hosted>(context.get());
#define PORT(name) {#name, [&](const Words &w) { assign(top->name, w); }}
    const std::map<std::string, std::function<void(const Words &)>> inputs = {
        PORT(tbl_en), PORT(tbl_ep), PORT(tbl_sel), PORT(tbl_index), PORT(tbl_data),
        PORT(mem_we), PORT(mem_addr), PORT(mem_wdata), PORT(fault_thresholds),
        PORT(fault_reorder_cycles), PORT(fault_seed), PORT(fault_load), PORT(host_en),
        PORT(host_ep), PORT(host_sel), PORT(host_addr), PORT(host_data), PORT(rows), PORT(run),
        PORT(sweep)};
#undef PORT
    // One clock period: inputs set before it are taken at its rising edge.
    auto tick = [&] {
        top->clk = 0;
        top->eval();
        top->clk = 1;
        top->eval();
    };
    auto play = [&](const std::string &line) {
        std::istringstream items(line);
        std::string item;
        while (items >> item) {
            const size_t eq = item.find('=');
            const auto port =
                eq == std::string::npos ? inputs.end() : inputs.find(item.substr(0, eq));
            if (port == inputs.end()) {
                std::fprintf(stderr, "%s: not an input of rdma_hosted: %s\n", argv[1],
                             item.c_str());
                std::exit(2);
            }
            port->second(parse_hex(item.substr(eq + 1)));
        }
        tick();
    };
    top->rst = 1;
    for (int k = 0; k < 3; k++) tick();
    top->rst = 0;
    std::string line;
    while (std::getline(script, line) && line != "wait") play(line);

    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    while (!top->done && top->cycle < limit) tick();
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
    const bool finished = top->done;
    const uint64_t cycles = top->cycle;
    const Words counters = words(top->counters);

    while (std::getline(script, line)) play(line);
    std::printf("{\"finished\": %s, \"cycles\": %" PRIu64 ", \"run_seconds\": %.6f",
                finished ? "true" : "false", cycles, seconds);
    print_words("counters", counters);
    print_words("hashes", words(top->hashes));
    std::printf("}\n");
    top->final();
    return 0;
}

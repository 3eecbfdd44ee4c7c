// Test driver: replays a scenario script with the C++ annotations and an
// injected clock. tests/native/scenario.py replays the same script with the
// Python ones; the two must write byte-identical profiles.
//
//     scenario PREFIX OUTDIR [--no-mpi]
//
// Rank r reads PREFIX.r.txt (rank 0 without MPI). One command per line,
// fields separated by tabs, names %-escaped as in docs/format.md:
//     profiler NAME FREQUENCY SELFKEYS | aggregators A | keep last|all | enter NAME COMMON LOOP SELFVALUES
//     exit | tick NS | flush | snapshot | drop (destroys the Profiler; C++ only)
//     meta KEY s|i|f VALUE (run metadata; the value %-escaped)
#include <tinyprof/tinyprof.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

namespace {

std::int64_t now_ns = 0;
std::int64_t fake_clock() { return now_ns; }

std::string unescape(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '%' && i + 2 < text.size()) {
            out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
            i += 2;
        } else {
            out += text[i];
        }
    }
    return out;
}

std::vector<std::string> split(const std::string& line) {
    std::vector<std::string> fields;
    std::stringstream in(line);
    std::string f;
    while (std::getline(in, f, '\t')) fields.push_back(f);
    if (!line.empty() && line.back() == '\t') fields.emplace_back();
    return fields;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: scenario PREFIX OUTDIR [--no-mpi]\n";
        return 2;
    }
    const bool mpi = !(argc > 3 && std::string(argv[3]) == "--no-mpi");
    int rank = 0;
    if (mpi) {
        int provided = 0;       // as mpi4py: aggregated snapshots need a second thread in MPI
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    TinyProf::set_clock(fake_clock);
    std::ifstream script(std::string(argv[1]) + "." + std::to_string(rank) + ".txt");
    std::unique_ptr<TinyProf::Profiler> prof;
    std::vector<std::unique_ptr<TinyProf::Event>> open;
    std::string line;
    while (std::getline(script, line)) {
        const auto f = split(line);
        if (f.empty()) continue;
        if (f[0] == "profiler") {
            prof = std::make_unique<TinyProf::Profiler>(unescape(f[1]), std::stod(f[2]), f[3]);
            prof->set_outdir(argv[2]);
        } else if (f[0] == "aggregators") {
            prof->set_aggregators(std::stoi(f[1]));
        } else if (f[0] == "meta") {
            if (f[2] == "s") TinyProf::metadata(f[1], unescape(f[3]));
            else if (f[2] == "i") TinyProf::metadata(f[1], std::stoll(f[3]));
            else TinyProf::metadata(f[1], std::stod(f[3]));
        } else if (f[0] == "keep") {
            prof->set_keep(f[1]);
        } else if (f[0] == "enter") {
            open.push_back(std::make_unique<TinyProf::Event>(unescape(f[1]), f[2] == "1",
                                                             std::stoi(f[3]), f[4]));
        } else if (f[0] == "exit") {
            open.pop_back();
        } else if (f[0] == "tick") {
            now_ns += std::stoll(f[1]);
        } else if (f[0] == "flush") {
            TinyProf::flush();
        } else if (f[0] == "snapshot") {
            if (!TinyProf::snapshot(60)) return 3;
        } else if (f[0] == "drop") {
            prof.reset();
        }
    }
    if (mpi) MPI_Finalize();
    return 0;
}

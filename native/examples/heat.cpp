// The paper's Fig. 2 as a small MPI program: a 1-D heat stencil with halo
// exchange, annotated with tinyprof. Build and run (docs/native.md):
//
//     mpicxx -std=c++17 -O2 -I native/include native/examples/heat.cpp -o heat
//     mpiexec -n 4 ./heat [steps] [outdir]
//
// The profile is written at MPI_Finalize (no explicit flush needed).
//
// One file of a program compiles tinyprof's implementation: this one (in a
// program that links the CMake target tinyprof::tinyprof, none does).
#define TINYPROF_IMPLEMENTATION
#include <tinyprof/tinyprof.hpp>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kCells = 4096;

// One time step: the stencil on the interior, then the halo exchange.
void step(std::vector<double>& u, std::vector<double>& next, int rank, int size) {
    {
        TinyProf::Event compute("compute", 1, "");          // one value per iteration
        for (std::size_t i = 1; i <= kCells; ++i) next[i] = u[i] + 0.25 * (u[i - 1] - 2 * u[i] + u[i + 1]);
        u.swap(next);
    }
    TINYPROF_REGION("exchange");
    const int left = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    const int right = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
    {
        // Summed per execution; the bytes moved as a custom metric.
        TinyProf::Event comm("comm", 2, "tag:2,mem:16");
        MPI_Sendrecv(&u[1], 1, MPI_DOUBLE, left, 0, &u[kCells + 1], 1, MPI_DOUBLE, right, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&u[kCells], 1, MPI_DOUBLE, right, 1, &u[0], 1, MPI_DOUBLE, left, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int steps = argc > 1 ? std::atoi(argv[1]) : 100;

    TinyProf::Profiler prof("heat", 0, "tag:0,mem:1");
    if (argc > 2) prof.set_outdir(argv[2]);

    for (int execution = 0; execution < 2; ++execution) {     // two executions of main
        TinyProf::Event main_event("main");
        std::vector<double> u(kCells + 2, rank), next(kCells + 2, 0.0);
        for (int s = 0; s < steps; ++s) step(u, next, rank, size);
        if (rank == 0) {
            TinyProf::Event report("report", false);          // rank 0 only: not common
        }
    }
    MPI_Finalize();                                           // flushes the profile
    return 0;
}

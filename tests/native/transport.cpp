// The transport view in C++ (test_transport.py), run with TINYPROF_UCX=1
// and MPIR_CVAR_NOLOCAL=1: rank 0 sends rank 1, in region "small", 10
// messages of 64 bytes, in "large" 3 of 800,000 bytes, then in "post" one
// more large one with Isend/Irecv, completed in "wait". argv[1]: the output
// directory.
#include <tinyprof/tinyprof.hpp>

#include <vector>

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    {
        TinyProf::Profiler prof("transport");
        prof.set_outdir(argv[1]);
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        std::vector<char> small(64), large(800000);
        auto exchange = [&](const char* region, std::vector<char>& buf, int times) {
            TinyProf::Event event(region);
            for (int i = 0; i < times; ++i) {
                if (rank == 0)
                    MPI_Send(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                else if (rank == 1)
                    MPI_Recv(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, 0, 0, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
            }
        };
        exchange("small", small, 10);
        exchange("large", large, 3);
        MPI_Request req = MPI_REQUEST_NULL;
        {
            TinyProf::Event event("post");
            if (rank == 0)
                MPI_Isend(large.data(), static_cast<int>(large.size()), MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req);
            else if (rank == 1)
                MPI_Irecv(large.data(), static_cast<int>(large.size()), MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req);
        }
        {
            TinyProf::Event event("wait");
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        }
    }
    MPI_Finalize();
    return 0;
}

// Python twin: tinyprof/runtime/clocksync.py; identity: tests/native/test_native_trace.py
//
// Trace mode's clock alignment to rank 0's (docs/trace.md#clocks).
#pragma once

#include <mpi.h>

#include "capture.hpp"
#include "event_map.hpp"
#include "session.hpp"

#include <array>
#include <cstdint>

namespace TinyProf {
namespace detail {

// Clock alignment to rank 0's: Cristian's algorithm over a binomial tree.
// {local, offset, error} in ns.
inline std::array<std::int64_t, 3> sync_clock(MPI_Comm comm) {
    constexpr int kExchanges = 8, kTag = 7401;
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    std::int64_t offset = 0, error = 0, ping = 0, pong[2] = {0, 0};
    for (int step = 1; step < size; step *= 2) {
        if (rank < step && rank + step < size) {                  // answer a child
            const int child = rank + step;
            for (int k = 0; k < kExchanges; ++k) {
                MPI_Recv(&ping, 1, MPI_INT64_T, child, kTag, comm, MPI_STATUS_IGNORE);
                pong[0] = steady_ns();
                MPI_Send(pong, 1, MPI_INT64_T, child, kTag, comm);
            }
            pong[0] = offset;
            pong[1] = error;
            MPI_Send(pong, 2, MPI_INT64_T, child, kTag, comm);
        } else if (step <= rank && rank < 2 * step) {             // ask the parent
            const int parent = rank - step;
            std::int64_t best_rtt = -1, best = 0;
            for (int k = 0; k < kExchanges; ++k) {
                const std::int64_t t0 = steady_ns();
                MPI_Send(&ping, 1, MPI_INT64_T, parent, kTag, comm);
                MPI_Recv(pong, 1, MPI_INT64_T, parent, kTag, comm, MPI_STATUS_IGNORE);
                const std::int64_t t1 = steady_ns();
                if (best_rtt < 0 || t1 - t0 < best_rtt) {
                    best_rtt = t1 - t0;
                    best = pong[0] - (t0 + t1) / 2;    // Python's floor division: times are positive
                }
            }
            MPI_Recv(pong, 2, MPI_INT64_T, parent, kTag, comm, MPI_STATUS_IGNORE);
            offset = pong[0] + best;
            error = pong[1] + (best_rtt + 1) / 2;
        }
    }
    return {steady_ns(), offset, error};
}

// Trace mode: align the clock (collective over the profiler's communicator
// while MPI is live), keeping the first and the latest alignment.
inline void sync_trace_clock(Registry& reg) {
    const MpiPause pause;
    const auto now = mpi_live() ? sync_clock(reg.settings.comm) : std::array<std::int64_t, 3>{steady_ns(), 0, 0};
    if (reg.syncs.empty()) reg.syncs.push_back(now);
    else reg.syncs = {reg.syncs.front(), now};
}

}  // namespace detail
}  // namespace TinyProf

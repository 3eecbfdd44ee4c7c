// Python twin: tinyprof/runtime/snapshots.py (the mpi section: runtime/session.py, _snapshot_extras);
// identity: tests/native/test_vectors.py, tests/native/test_pop.py (the mpi section)
//
// Snapshots (docs/native.md, "Snapshots"): a helper thread per process that
// writes full and delta snapshots while the run goes on.
#pragma once

#include <mpi.h>

#include "assemble.hpp"
#include "capture.hpp"
#include "collect.hpp"
#include "output_dir.hpp"
#include "session.hpp"
#include "settings.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <pthread.h>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace TinyProf {
namespace detail {

class Stopped : public std::exception {};

// This process's snapshots (docs/native.md, "Snapshots"): a helper thread
// that, at time start + k * frequency (or at once when asked), cuts this
// rank's data and either sends it to its group's aggregator with
// nonblocking point-to-point messages on a duplicate of the profiler's
// communicator, the aggregator writing one file of A, then agrees with one
// nonblocking allreduce that snapshot k is complete and which number comes
// next (MPI_THREAD_MULTIPLE); or writes this rank's own file of the set
// with no MPI call (no MPI, or a lower thread level). The application's
// threads never wait for another rank.
class Snapshotter {
  public:
    // Collective over `comm` while MPI is live: agrees on the start time and
    // duplicates `comm` for aggregated snapshots.
    void start(Registry& reg, MPI_Comm comm) {
        halt();
        free_comm();
        std::lock_guard<std::mutex> lock(mutex_);
        reg_ = &reg;
        frequency_ = reg.settings.frequency;
        stop_ = exited_ = false;
        stopped_.store(false);
        wanted_ = false;
        last_ = 0;
        base_.clear();
        over_ = -1;
        deltas_ = fulls_ = 0;
        chain_.clear();
        start_ = wall();
        rank_ = 0;
        size_ = 1;
        lib_ = nullptr;
#ifdef TINYPROF_SMPI
        // A thread of a simulated rank runs outside the simulation, and its first
        // call into SMPI (getpid, nanosleep: macros of smpicxx) crashes the run.
        if (mpi_live()) MPI_Comm_rank(comm, &rank_);
        if (rank_ == 0)
            warn("no snapshots under SimGrid SMPI (a simulated rank cannot have a helper thread): "
                 "the profile is written by flush() and at MPI_Finalize");
        return;
#endif
        if (mpi_live()) {
            MPI_Comm_rank(comm, &rank_);
            MPI_Comm_size(comm, &size_);
            // The flush's rule (flushes_world): the `mpi` section's rows name world ranks.
            int same = MPI_UNEQUAL;
            MPI_Comm_compare(comm, MPI_COMM_WORLD, &same);
            if (reg.mpi_capture && (same == MPI_IDENT || same == MPI_CONGRUENT)) lib_ = mpi_lib();
            ucx_ = reg.ucx;
            MPI_Bcast(&start_, 1, MPI_DOUBLE, 0, comm);
            int level = MPI_THREAD_SINGLE;
            MPI_Query_thread(&level);
            if (level == MPI_THREAD_MULTIPLE) {
                MPI_Comm_dup(comm, &comm_);
            } else if (rank_ == 0) {
                warn("MPI thread level is below MPI_THREAD_MULTIPLE: each rank writes its own snapshot "
                     "file (P files per snapshot, no MPI call)");
            }
        }
        // The thread starts with the asynchronous signals blocked (it inherits
        // the mask): a signal the application blocked, to sigwait() for it,
        // must reach the application, never this thread (runtime/lifecycle.py).
        sigset_t mask, old;
        sigfillset(&mask);
        for (const int sync : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS}) sigdelset(&mask, sync);
        pthread_sigmask(SIG_BLOCK, &mask, &old);
        thread_ = std::thread([this] { loop(); });
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }

    // A snapshot now, besides the periodic ones: whether one that cut this
    // rank's data after the call ended within `timeout` seconds.
    bool request(double timeout) {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!thread_.joinable() || stop_ || exited_) return false;
        const std::int64_t target = cuts_;
        wanted_ = true;
        changed_.notify_all();
        changed_.wait_for(lock, std::chrono::duration<double>(timeout),
                          [&] { return ended_ > target || stop_ || exited_; });
        return ended_ > target;
    }

    // Stops the helper: it makes no MPI call after this returns, and is
    // joined unless a snapshot in progress takes longer than kStopTimeout.
    void halt() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
            changed_.notify_all();
        }
        stopped_.store(true);
        if (!thread_.joinable()) return;
        if (mpi_mutex_.try_lock_for(kStopTimeout)) mpi_mutex_.unlock();   // none in flight, none after
        std::unique_lock<std::mutex> lock(mutex_);
        if (changed_.wait_for(lock, kStopTimeout, [&] { return exited_; })) {
            lock.unlock();
            thread_.join();
        } else {
            thread_.detach();
            pending_ = true;        // it may still hold requests: never free its communicator
        }
    }

    // After halt(), while MPI is live: frees the duplicate unless requests on
    // it were left pending (MPI_Finalize frees it then).
    void free_comm() {
        if (comm_ != MPI_COMM_NULL && !pending_ && !thread_.joinable() && mpi_live()) MPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
        pending_ = false;
    }

  private:
    static constexpr std::chrono::seconds kStopTimeout{5};
    static constexpr int kSize = 11, kData = 12;   // message tags: a part's size, its bytes

    static double wall() {
        return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    }

    Settings settings() {
        std::lock_guard<std::mutex> lock(reg_->mutex);
        refresh_meta(*reg_, rank_);
        return reg_->settings;
    }

    void loop() {
        const MpiPause pause;     // its MPI traffic is tinyprof's, never the application's
        std::int64_t k = 1;
        try {
            while (true) {
                {
                    std::unique_lock<std::mutex> lock(mutex_);
                    // At most a year ahead: a huge frequency must not overflow the clock.
                    const double at = std::min(start_ + static_cast<double>(k) * frequency_, wall() + 3.2e7);
                    const auto due = std::chrono::system_clock::time_point(
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(at)));
                    changed_.wait_until(lock, due, [&] { return stop_ || wanted_; });
                    if (stop_) break;
                    wanted_ = false;
                    ++cuts_;
                }
                k = comm_ != MPI_COMM_NULL ? aggregated(k) : per_rank(k);
                std::lock_guard<std::mutex> lock(mutex_);
                ++ended_;
                changed_.notify_all();
            }
        } catch (const Stopped&) {
        } catch (const std::exception& e) {       // the profiler never takes the application down
            warn(std::string("snapshots stopped: ") + e.what());
        }
        std::lock_guard<std::mutex> lock(mutex_);
        exited_ = true;
        changed_.notify_all();
    }

    // The number of the newest periodic snapshot due by now.
    std::int64_t due(double f) const { return static_cast<std::int64_t>(std::floor((wall() - start_) / f)); }

    // Per rank: this rank's file of snapshot k (or of the next one due, if
    // later); snapshots in between that other ranks started get it too,
    // labelled as theirs, so that they complete (ranks skip numbers apart).
    std::int64_t per_rank(std::int64_t k) {
        const Settings s = settings();
        k = std::max(k, due(frequency_));
        const bool full = full_next(s);
        Bases now;
        const std::string part = cut(full, now);
        const std::vector<Part> parts{decode_part(part)};
        const FileHeader h{size_, rank_, 1, rank_, size_, {}};
        const std::int64_t over = full ? -1 : over_;
        const std::string run = format::hex16(reg_->run_id);
        for (const std::int64_t j : snapshot_numbers(s))
            if (last_ < j && j < k && over < j && holds_run(snapshot_dir(s, j), run))  // not an earlier run's
                write(s, j, assemble(s, {reg_->run_id, j, "snapshot", over}, h, parts), rank_, size_);
        if (write(s, k, assemble(s, {reg_->run_id, k, "snapshot", over}, h, parts), rank_, size_)) {
            last_ = k;
            commit(k, now, full);
            if (s.keep_last && rank_ == 0) prune(s, size_, run);
        }
        return k + 1;
    }

    // This rank's part of a snapshot: whole, or since the last complete one
    // (base_); `now` gets what its fields then hold. With MPI capture, its
    // part of the `mpi` section too, whole (never a delta: docs/format.md),
    // its lines this part's entries, as the Python side's snapshot extras.
    std::string cut(bool full, Bases& now) {
        const Bases none;
        const MpiTables tables = lib_ ? read_mpi(*lib_, ucx_) : MpiTables();   // every node named is in `local`
        const Local local = collect_local(*reg_, full ? &none : &base_, &now);
        const std::string mpi = lib_ ? encode_rank_mpi(*lib_, tables, [&](std::int64_t node) {
            const auto id = static_cast<std::size_t>(node);
            const int entry = node > 0 && id < local.entry_of_node.size() ? local.entry_of_node[id] : -1;
            return entry < 0 ? mpisection::kNone : std::int64_t{entry};
        }) : std::string();
        return encode_part(local, executions_now(), mpi);     // after the cut: never fewer than the fields hold
    }

    // Deltas before the next full snapshot: `chain` after the first full
    // one, twice as many after each later one (the Python side's
    // chain_length: full ones rewrite all the data, so they come
    // geometrically spaced, and all snapshots write a few times the data).
    std::int64_t chain_length(const Settings& s) const {
        return std::int64_t{s.chain} << std::min(std::max(fulls_ - 1, std::int64_t{0}), std::int64_t{40});
    }

    // Whether the next snapshot is full: nothing complete to build on, or the
    // chain is long enough. (Numbers only grow here, unlike the Python side's
    // take(k), so no delta could be over a later snapshot.)
    bool full_next(const Settings& s) const { return over_ < 0 || deltas_ >= chain_length(s); }

    // Snapshot k is complete: the next delta builds on it.
    void commit(std::int64_t k, Bases& now, bool full) {
        base_ = std::move(now);
        over_ = k;
        deltas_ = full ? 0 : deltas_ + 1;
        fulls_ += full;
        if (full) chain_.clear();
        chain_.push_back(k);
    }

    // Snapshot k, aggregated; the number of the next one, agreed by all ranks.
    // Full, or a delta over the last complete one: every rank decides alike
    // from what all agreed.
    std::int64_t aggregated(std::int64_t k) {
        const Settings s = settings();
        const bool full = full_next(s);
        Bases now;
        const std::string part = cut(full, now);
        const int naggs = aggregator_count(s, size_);
        const Group g = group_of(rank_, size_, naggs);
        std::int64_t agreed[2] = {1, 0};     // MIN: every file written, the latest next number
        if (rank_ != g.first) {
            const std::int64_t n = static_cast<std::int64_t>(part.size());
            exchange([&] {
                std::vector<MPI_Request> r(2);
                MPI_Isend(&n, 1, MPI_INT64_T, g.first, kSize, comm_, &r[0]);
                MPI_Isend(part.data(), static_cast<int>(n), MPI_BYTE, g.first, kData, comm_, &r[1]);
                return r;
            });
        } else {
            std::vector<std::int64_t> sizes(static_cast<std::size_t>(g.size));
            exchange([&] {
                std::vector<MPI_Request> r(sizes.size() - 1);
                for (int i = 1; i < g.size; ++i)
                    MPI_Irecv(&sizes[static_cast<std::size_t>(i)], 1, MPI_INT64_T, g.first + i, kSize, comm_,
                              &r[static_cast<std::size_t>(i - 1)]);
                return r;
            });
            std::vector<std::string> received(sizes.size());
            exchange([&] {
                std::vector<MPI_Request> r(sizes.size() - 1);
                for (int i = 1; i < g.size; ++i) {
                    auto& b = received[static_cast<std::size_t>(i)];
                    b.resize(static_cast<std::size_t>(sizes[static_cast<std::size_t>(i)]));
                    MPI_Irecv(b.data(), static_cast<int>(b.size()), MPI_BYTE, g.first + i, kData, comm_,
                              &r[static_cast<std::size_t>(i - 1)]);
                }
                return r;
            });
            std::vector<Part> parts{decode_part(part)};
            for (int i = 1; i < g.size; ++i) parts.push_back(decode_part(received[static_cast<std::size_t>(i)]));
            const FileHeader h{size_, g.first, g.size, g.index, naggs, {}};
            agreed[0] = write(s, k, assemble(s, {reg_->run_id, k, "snapshot", full ? -1 : over_}, h, parts),
                              g.index, naggs);
        }
        agreed[1] = -std::max(k + 1, due(frequency_) + 1);
        exchange([&] {
            std::vector<MPI_Request> r(1);
            MPI_Iallreduce(MPI_IN_PLACE, agreed, 2, MPI_INT64_T, MPI_MIN, comm_, &r[0]);
            return r;
        });
        last_ = k;
        if (agreed[0]) {
            commit(k, now, full);
            if (s.keep_last && rank_ == 0) remove_older(s, chain_, format::hex16(reg_->run_id));
        }
        return -agreed[1];
    }

    bool write(const Settings& s, std::int64_t k, const std::string& data, int index, int nfiles) {
        const auto dir = snapshot_dir(s, k);
        const std::string path = (dir / format::file_name(s.name, index, nfiles)).string();
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (format::write_atomic(path, data)) return true;
        const int error = errno;
        std::lock_guard<std::mutex> lock(mutex_);
        if (!write_warned_)
            warn("cannot write snapshot file " + path + ": " + std::strerror(error) +
                 "; the next snapshot holds its data");
        write_warned_ = true;
        return false;
    }

    // keep "last": removes this run's files of the snapshots older than the
    // newest of `chain` (a complete snapshot and those it builds on) that are
    // not in it, and their directories once empty; an earlier run's files in
    // the same directory stay (docs/format.md, "Snapshots").
    static void remove_older(const Settings& s, const std::vector<std::int64_t>& chain, const std::string& run) {
        for (const std::int64_t j : snapshot_numbers(s)) {
            if (j >= chain.back() || std::find(chain.begin(), chain.end(), j) != chain.end()) continue;
            std::error_code ec;
            const auto dir = snapshot_dir(s, j);
            for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
                const auto head = format::head_lines(e.path());
                if (!head.empty() && head[2] == "run " + run) std::filesystem::remove(e.path(), ec);
            }
            std::filesystem::remove(dir, ec);       // only if empty
        }
    }

    // Whether a file of run `run` is in `dir` (a snapshot this run started).
    static bool holds_run(const std::filesystem::path& dir, const std::string& run) {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
            const auto head = format::head_lines(e.path());
            if (!head.empty() && head[2] == "run " + run) return true;
        }
        return false;
    }

    // Per rank, where each rank's files follow its own chain: keep "last"
    // below this run's newest complete snapshot, read from the files' `set` lines.
    static void prune(const Settings& s, int nfiles, const std::string& run) {
        const auto numbers = snapshot_numbers(s);
        for (auto k = numbers.rbegin(); k != numbers.rend(); ++k) {
            std::vector<std::int64_t> chain;
            if (!chain_of(s, *k, nfiles, run, chain)) continue;
            std::sort(chain.begin(), chain.end());
            return remove_older(s, chain, run);
        }
    }

    // Whether snapshot k of run `run` is complete: all its files there, each
    // saying `set snapshot k` of that run, and those of the snapshots their
    // deltas build on (added to `chain`, with k).
    static bool chain_of(const Settings& s, std::int64_t k, int nfiles, const std::string& run,
                         std::vector<std::int64_t>& chain) {
        if (std::find(chain.begin(), chain.end(), k) != chain.end()) return true;
        chain.push_back(k);
        const std::string set = "set snapshot " + std::to_string(k);
        for (int i = 0; i < nfiles; ++i) {
            const auto head = format::head_lines(snapshot_dir(s, k) / format::file_name(s.name, i, nfiles));
            if (head.empty() || head[2] != "run " + run || head[3].compare(0, set.size(), set) != 0)
                return false;
            const std::string& line = head[3];
            if (line.size() == set.size()) continue;
            if (line.compare(set.size(), 6, " over ") != 0) return false;
            const std::int64_t over = std::strtoll(line.c_str() + set.size() + 6, nullptr, 10);
            if (over >= k || !chain_of(s, over, nfiles, run, chain)) return false;
        }
        return true;
    }

    // Posts requests (post()) and sleep-polls them until done: no busy wait
    // while other ranks are late. Each MPI call happens under mpi_mutex_ and
    // only while not stopped, so none follows halt(); then Stopped (the
    // requests stay pending: cancelling a collective is erroneous).
    template <class Post>
    void exchange(Post&& post) {
        std::vector<MPI_Request> requests;
        bool posted = false;
        auto nap = std::chrono::microseconds(500);
        while (true) {
            {
                std::lock_guard<std::timed_mutex> lock(mpi_mutex_);
                if (stopped_.load()) {
                    pending_ = pending_ || posted;
                    throw Stopped();
                }
                if (!posted) {
                    requests = post();
                    posted = true;
                } else {
                    int done = 0;
                    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
                    if (done) return;
                }
            }
            std::this_thread::sleep_for(nap);
            nap = std::min(2 * nap, std::chrono::microseconds(20000));
        }
    }

    Registry* reg_ = nullptr;
    std::thread thread_;
    std::mutex mutex_;                     // guards what follows, up to mpi_mutex_
    std::condition_variable changed_;      // wanted_, stop_, ended_ or exited_ changed
    bool stop_ = false, exited_ = false, wanted_ = false, write_warned_ = false;
    std::int64_t cuts_ = 0, ended_ = 0;    // snapshots begun (data cut) and ended
    std::timed_mutex mpi_mutex_;           // held by the helper around each MPI call
    std::atomic<bool> stopped_{false};
    bool pending_ = false;                 // requests on comm_ left pending by halt()
    MPI_Comm comm_ = MPI_COMM_NULL;        // aggregated: tinyprof's duplicate
    double start_ = 0;                     // rank 0's wall clock at start (s)
    double frequency_ = 0;                 // the period (s)
    int rank_ = 0, size_ = 1;
    const MpiLib* lib_ = nullptr;          // MPI capture on, over MPI_COMM_WORLD: snapshots get `mpi`
    std::string ucx_;                      // ... and the transport view's state (Registry::ucx)
    std::int64_t last_ = 0;                // per rank: the newest number written
    // What this rank's fields held at the last complete snapshot (over_, -1:
    // none), deltas since the last full one, full ones so far, the chain.
    Bases base_;
    std::int64_t over_ = -1, deltas_ = 0, fulls_ = 0;
    std::vector<std::int64_t> chain_;
};

// Not inline, as registry(): one per process, one per SMPI rank.
Snapshotter& snapshotter() {
    static Snapshotter* s = new Snapshotter();   // never destroyed, as the registry
    return *s;
}

inline void stop_snapshots() {
    const MpiPause pause;
    snapshotter().halt();
    snapshotter().free_comm();
}

}  // namespace detail
}  // namespace TinyProf

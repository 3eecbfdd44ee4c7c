// Python twin: tinyprof/runtime/collect.py, tinyprof/runtime/assemble.py (rank_part); identity: tests/native/test_vectors.py
//
// The event map copied out for a flush or a snapshot: every thread's tree
// merged into this rank's callpaths, each with its field encoded; and that
// rank part as a snapshot sends it to its aggregator.
#pragma once

#include "encoding.hpp"
#include "event_map.hpp"
#include "session.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace TinyProf {
namespace detail {

// Callpaths as (parent entry, last name) pairs, each parent an earlier entry
// (-1 for a root callpath): every step of the flush is linear in the depth.
class Callpaths {
  public:
    std::vector<int> parent;
    std::vector<std::string> name;
    std::vector<int> loop;

    std::size_t size() const { return name.size(); }

    // The entry of (up, n), or -1.
    int find(int up, std::string_view n) const {
        const auto it = index_.find(key(up, n));
        return it == index_.end() ? -1 : it->second;
    }

    // The entry of (up, n), appended if new. Python's merge_loop: the first
    // loop mode wins, but mode 2 gives way to 0 or 1.
    int add(int up, std::string_view n, int l) {
        const auto [it, added] = index_.try_emplace(key(up, n), static_cast<int>(size()));
        if (added) {
            parent.push_back(up);
            name.emplace_back(n);
            loop.push_back(l);
        } else if (loop[static_cast<std::size_t>(it->second)] == 2) {
            loop[static_cast<std::size_t>(it->second)] = l;
        }
        return it->second;
    }

  private:
    static std::string key(int up, std::string_view n) {
        std::string k(sizeof up, '\0');
        std::memcpy(k.data(), &up, sizeof up);
        k.append(n);
        return k;
    }
    std::unordered_map<std::string, int> index_;
};

// What a rank field held at a snapshot that a delta builds on (the Python
// side's assemble.Base): the occurrences written for good (all but the
// newest, which may still change), the bytes they take, the bytes of the rest.
struct FieldBase {
    std::size_t count = 0, length = 0;
    std::string tail;
};
using Bases = std::unordered_map<std::string, FieldBase>;   // by callpath (length-prefixed names)

// This process's callpaths, all threads merged, and its values of each.
struct Local {
    Callpaths paths;
    std::vector<bool> common;              // the first tree's is_common hint
    std::vector<std::string> field;        // this rank's values: exec;exec of occ+occ
    // With a base (snapshots): `field` holds the bytes that follow the first
    // keep[i] bytes of the base's field, and listed[i] says they differ from
    // what the base holds there. Without one, keep is 0 and listed non-empty.
    std::vector<std::size_t> keep;
    std::vector<bool> listed;
    std::vector<std::string> consistent;   // consistent metrics in header order
    std::vector<int> entry_of_node;        // node id -> entry, -1 for the roots (and unseen ids)
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline double nan_sum(double a, double b) { return a != a ? b : b != b ? a : a + b; }

// The values `node` has published, read under its tree's mutex: its
// occurrences appended to `occ`, its consistent values where still missing.
// The size of times is read first: executions are published before their
// first time, metric values after their time.
inline void read_node(const Node& node, std::size_t ninc, std::vector<Occurrence>& occ,
                      std::vector<std::optional<double>>& consistent) {
    const std::size_t n = node.times.size();
    std::vector<ExecStart> starts;
    node.execs.for_each(node.execs.size(), [&](const ExecStart& e) {
        if (e.first < n) starts.push_back(e);
    });
    const std::size_t base = occ.size();
    std::size_t i = 0, k = 0;
    if (!starts.empty()) {
        node.times.for_each(n, [&](const std::atomic<std::int64_t>& t) {
            while (k + 1 < starts.size() && starts[k + 1].first <= i) ++k;
            occ.push_back({starts[k].exec, t.load(std::memory_order_relaxed), std::vector<double>(ninc, kNaN)});
            ++i;
        });
    }
    node.metrics.for_each(node.metrics.size(), [&](const MetricValue& v) {
        if (v.occurrence < i && v.slot < ninc)
            occ[base + v.occurrence].metrics[v.slot] = v.value.load(std::memory_order_relaxed);
    });
    node.consistent.for_each(node.consistent.size(), [&](const MetricValue& v) {
        if (v.slot < consistent.size() && !consistent[v.slot])
            consistent[v.slot] = v.value.load(std::memory_order_relaxed);
    });
}

// Every thread's tree merged into one list of callpaths (each tree in
// pre-order, the first registered first), each encoded at once. Occurrences
// of one execution keep thread order; loop-2 callpaths sum them into one.
// Each tree is read under its mutex, so its thread may go on recording.
// With `base`, the fields are relative to it and `now` gets the new base.
inline Local collect_local(Registry& reg, const Bases* base = nullptr, Bases* now = nullptr) {
    std::size_t ninc = 0, ncons = 0;
    for (const auto& m : reg.settings.metrics) ++(m.second ? ncons : ninc);
    const std::vector<Tree*> threads = trees(reg);
    Local local;
    std::vector<std::string> keys;         // with a base: each callpath's key in it
    std::vector<const Tree*> first_tree;   // the first tree with each callpath
    std::vector<bool> merged;              // ... and whether another one has it too
    std::vector<std::vector<Occurrence>> occ;
    std::vector<std::vector<std::optional<double>>> consistent;
    for (Tree* t : threads) {
        std::lock_guard<std::mutex> lock(t->mutex);
        std::vector<std::pair<const Node*, int>> stack;
        for (auto it = t->root.children.rbegin(); it != t->root.children.rend(); ++it)
            stack.emplace_back(it->get(), -1);
        while (!stack.empty()) {
            const auto [node, up] = stack.back();
            stack.pop_back();
            const int i = local.paths.add(up, node->name, node->loop);
            const auto at = static_cast<std::size_t>(i);
            const auto id = static_cast<std::size_t>(node->id);
            if (id >= local.entry_of_node.size()) local.entry_of_node.resize(id + 1, -1);
            local.entry_of_node[id] = i;
            if (at == occ.size()) {
                occ.emplace_back();
                consistent.emplace_back(ncons);
                local.common.push_back(node->common);
                merged.push_back(false);
                first_tree.push_back(t);
            }
            merged[at] = merged[at] || first_tree[at] != t;
            read_node(*node, ninc, occ[at], consistent[at]);
            for (auto it = node->children.rbegin(); it != node->children.rend(); ++it)
                stack.emplace_back(it->get(), i);
        }
    }
    for (std::size_t i = 0; i < occ.size(); ++i) {
        std::vector<Occurrence>& o = occ[i];
        if (threads.size() > 1) {
            std::stable_sort(o.begin(), o.end(),
                             [](const Occurrence& a, const Occurrence& b) { return a.exec < b.exec; });
            if (local.paths.loop[i] == 2) {
                std::vector<Occurrence> sums;
                for (auto& x : o) {
                    if (!sums.empty() && sums.back().exec == x.exec) {
                        sums.back().time += x.time;
                        for (std::size_t k = 0; k < ninc; ++k)
                            sums.back().metrics[k] = nan_sum(sums.back().metrics[k], x.metrics[k]);
                    } else {
                        sums.push_back(std::move(x));
                    }
                }
                o = std::move(sums);
            }
        }
        std::string cons;
        for (std::size_t k = 0; k < ncons; ++k) {
            if (k > 0) cons += ',';
            if (consistent[i][k]) cons += format::format_value(*consistent[i][k]);
        }
        while (!cons.empty() && cons.back() == ',') cons.pop_back();
        if (base == nullptr) {
            local.field.push_back(encode_field(o, 0, o.size()));
            local.keep.push_back(0);
            local.listed.push_back(!local.field.back().empty());
        } else {        // the Python side's rank_part, field by field
            const int up = local.paths.parent[i];
            keys.push_back((up < 0 ? std::string() : keys[static_cast<std::size_t>(up)]) +
                           std::to_string(local.paths.name[i].size()) + ":" + local.paths.name[i]);
            // Occurrences merged from several threads' trees may fall before
            // those already written (an earlier execution's): such a field
            // is written whole (kept from nothing), never spliced wrong.
            const auto was = base->find(keys[i]);
            const FieldBase old = was == base->end() || merged[i] ? FieldBase() : was->second;
            const std::size_t n = o.size(), from = std::min(old.count, n);
            const std::size_t stable = std::max(n > 0 ? n - 1 : 0, from);
            std::string text = encode_field(o, from, stable);
            const std::string rest = encode_field(o, stable, n);
            const bool changed = !text.empty() || rest != old.tail;
            (*now)[keys[i]] = {stable, old.length + text.size(), rest};
            local.field.push_back(changed ? text + rest : std::string());
            local.keep.push_back(old.length);
            local.listed.push_back(changed);
        }
        local.consistent.push_back(std::move(cons));
        o = std::vector<Occurrence>();
    }
    return local;
}

// One rank's share of a snapshot file, as it sends it to its aggregator:
// executions, then per callpath (pre-order) its parent position (-1: a
// root), loop mode, whether its field is listed, the bytes kept from the
// base's field, name, consistent metrics and rank field (Local's).
inline void put(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
inline void put(std::string& out, std::string_view v) {
    put(out, static_cast<std::int64_t>(v.size()));
    out.append(v);
}

// A snapshot's part of one rank: `mpi` is its part of the `mpi` section
// (capture.hpp's encode_rank_mpi, lines: entries of `local`), or empty.
inline std::string encode_part(const Local& local, std::int64_t executions, std::string_view mpi = {}) {
    std::string out;
    put(out, executions);
    put(out, mpi);
    put(out, static_cast<std::int64_t>(local.paths.size()));
    for (std::size_t i = 0; i < local.paths.size(); ++i) {
        put(out, local.paths.parent[i]);
        put(out, local.paths.loop[i]);
        put(out, static_cast<std::int64_t>(local.listed[i]));
        put(out, static_cast<std::int64_t>(local.keep[i]));
        put(out, local.paths.name[i]);
        put(out, local.consistent[i]);
        put(out, local.field[i]);
    }
    return out;
}

// A part read back: views into the received bytes.
struct Part {
    std::int64_t executions = 0;
    std::vector<int> parent, loop, listed;
    std::vector<std::int64_t> keep;
    std::vector<std::string_view> name, consistent, field;
    std::string_view mpi;                  // its part of the `mpi` section (lines: its entries), or empty
};

inline Part decode_part(std::string_view in) {
    auto number = [&in]() {
        std::int64_t v;
        std::memcpy(&v, in.data(), sizeof v);
        in.remove_prefix(sizeof v);
        return v;
    };
    auto text = [&]() {
        const auto n = static_cast<std::size_t>(number());
        const std::string_view v = in.substr(0, n);
        in.remove_prefix(n);
        return v;
    };
    Part p;
    p.executions = number();
    p.mpi = text();
    for (std::int64_t i = number(); i > 0; --i) {
        p.parent.push_back(static_cast<int>(number()));
        p.loop.push_back(static_cast<int>(number()));
        p.listed.push_back(static_cast<int>(number()));
        p.keep.push_back(number());
        p.name.push_back(text());
        p.consistent.push_back(text());
        p.field.push_back(text());
    }
    return p;
}

}  // namespace detail
}  // namespace TinyProf

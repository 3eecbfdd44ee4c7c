// Python twin: tinyprof/annotate/pyevent.py, tinyprof/annotate/metrics.py; identity: tests/native/test_vectors.py
//
// The event map's cold paths, declared in event_map.hpp: out of line, so that
// an annotating file compiles only the hot path. Defined here once, in the
// file that defines TINYPROF_IMPLEMENTATION (tinyprof.hpp).
#pragma once

#include "event_map.hpp"
#include "session.hpp"
#include "settings.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace TinyProf {
namespace detail {

// The hot path's state (event_map.hpp), defined here once.
ClockFn clock_override = nullptr;
TINYPROF_PER_THREAD std::int32_t current_node = 0;
std::atomic<std::int64_t> trace_limit{0};
std::atomic<std::int64_t> trace_kept{0};
std::atomic<std::int64_t> trace_dropped{0};
std::atomic<std::int64_t> execution{-1};
std::atomic<const std::string*> first_root{nullptr};
TINYPROF_PER_THREAD Tree* this_tree = nullptr;

// Node ids for the MPI library's attribution: 0 is every tree's root.
std::atomic<std::int32_t> next_node_id{1};

Tree* register_thread() {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    reg.trees.push_back(std::make_unique<Tree>());
    this_tree = reg.trees.back().get();
    this_tree->tid = static_cast<std::int64_t>(syscall(SYS_gettid));
    return this_tree;
}

struct ChildIndex : std::unordered_map<std::string_view, Node*> {};

void DropIndex::operator()(ChildIndex* index) const { delete index; }

Node* Node::lookup(std::string_view key, int new_loop, bool new_common, std::mutex& mutex) {
    static constexpr std::size_t kIndexFrom = 8;
    if (index) {
        const auto it = index->find(key);
        if (it != index->end()) return it->second;
    }
    auto made = std::make_unique<Node>(key, this, new_loop, new_common);
    made->id = next_node_id.fetch_add(1, std::memory_order_relaxed);
    Node* node = made.get();
    std::lock_guard<std::mutex> lock(mutex);
    children.push_back(std::move(made));
    if (index) {
        index->emplace(node->name, node);
    } else if (children.size() > kIndexFrom) {
        index.reset(new ChildIndex());
        for (auto& c : children) index->emplace(c->name, c.get());
    }
    return node;
}

bool set_first_root(std::string_view name) {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    if (first_root.load(std::memory_order_relaxed) != nullptr) return false;
    execution.store(0, std::memory_order_relaxed);
    first_root.store(new std::string(name), std::memory_order_release);
    return true;
}

inline double parse_double(std::string_view text, std::string_view event) {
    double v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size())
        throw std::invalid_argument("tinyprof: Event '" + std::string(event) +
                                    "': metric value '" + std::string(text) + "' is not a number");
    return v;
}

std::vector<Metric> parse_values(std::string_view event, std::string_view selfvalues) {
    Registry& reg = registry();
    std::vector<Metric> out;
    for_each_item(selfvalues, [&](std::string_view item) {
        const auto colon = item.rfind(':');
        if (colon == std::string_view::npos || colon == 0)
            throw std::invalid_argument("tinyprof: Event '" + std::string(event) +
                                        "': bad selfvalues item '" + std::string(item) +
                                        "': expected key:value");
        const auto key = item.substr(0, colon);
        const double value = parse_double(trim(item.substr(colon + 1)), event);
        std::size_t slots[2] = {0, 0};                  // [inconsistent, consistent]
        for (const auto& [k, consistent] : reg.settings.metrics) {
            if (k == key) {
                out.push_back({consistent, slots[consistent], value});
                return;
            }
            ++slots[consistent];
        }
        std::lock_guard<std::mutex> lock(reg.mutex);
        for (const auto& w : reg.warned)
            if (w == key) return;
        reg.warned.emplace_back(key);
        std::fprintf(stderr, "tinyprof: metric '%.*s' (event '%.*s') is not declared in "
                     "Profiler(selfkeys); its values are not recorded\n",
                     static_cast<int>(key.size()), key.data(),
                     static_cast<int>(event.size()), event.data());
    });
    return out;
}

void bad_loop(std::string_view event) {
    throw std::invalid_argument("tinyprof: Event '" + std::string(event) + "': loop must be 0, 1 or 2");
}

void exited_out_of_order(const Node& node, const Node& innermost) {
    std::fprintf(stderr, "tinyprof: event '%s' exited out of order (innermost open event is '%s')\n",
                 node.name.c_str(), innermost.name.c_str());
    std::abort();
}

}  // namespace detail
}  // namespace TinyProf

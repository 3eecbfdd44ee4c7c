// Python twin: tinyprof/format/encoding.py; identity: tests/native/test_vectors.py
//
// The pieces of the file format (docs/format.md, version 3), the same bytes
// as the Python side's: text escaping, metric values, run-length counts, the
// CRC of the end line, and a rank's field of one callpath.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace TinyProf {
namespace detail {
namespace format {

// The length of the well-formed UTF-8 sequence at the start of `s` (as
// Python's strict decoder: no overlong form, surrogate or code point above
// U+10FFFF), or 0 if it is not one.
inline std::size_t utf8_length(std::string_view s) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned lead = byte(0);
    if (lead < 0x80) return 1;
    std::size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;          // the second byte's range
    if (lead >= 0xC2 && lead <= 0xDF) n = 2;
    else if (lead >= 0xE0 && lead <= 0xEF) n = 3, lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
    else if (lead >= 0xF0 && lead <= 0xF4) n = 4, lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
    if (n == 0 || s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
    for (std::size_t i = 2; i < n; ++i)
        if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
    return n;
}

// `text` as UTF-8: each byte that is not part of a well-formed sequence
// becomes the lone surrogate U+DC00+b in its 3-byte form (Python's
// surrogateescape, then surrogatepass), so any byte string reads back.
inline std::string utf8_safe(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    while (!text.empty()) {
        std::size_t n = utf8_length(text);
        if (n > 0) {
            out.append(text.substr(0, n));
        } else {
            const unsigned code = 0xDC00u + static_cast<unsigned char>(text[0]);
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
            n = 1;
        }
        text.remove_prefix(n);
    }
    return out;
}

// CRC-32 (IEEE 802.3, reflected, as zlib.crc32) of `data`, for the end line.
inline std::uint32_t crc32(std::string_view data) {
    static const auto table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    std::uint32_t c = 0xFFFFFFFFu;
    for (const char ch : data) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// A run id as the `run` line writes it: 16 lowercase hex digits.
inline std::string hex16(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// Text for the file (docs/format.md, "Escaping"), valid UTF-8 whatever the bytes.
inline std::string escape(std::string_view raw, bool key = false) {
    const std::string text = utf8_safe(raw);
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '%': out += "%25"; break;
            case '\n': out += "%0A"; break;
            case '\r': out += "%0D"; break;
            case ':': out += key ? "%3A" : ":"; break;
            case ',': out += key ? "%2C" : ","; break;
            case ' ': out += key ? "%20" : " "; break;
            default: out += c;
        }
    }
    return out;
}

// Canonical metric value text: Python's format_value, via the shortest
// round-trip digits of std::to_chars, laid out by the format's own rule
// (fixed for decimal exponents -4..15, else scientific without '+').
inline std::string format_value(double v) {
    if (v != v) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (v == std::trunc(v) && std::fabs(v) < 1e16) {
        if (v == 0) return std::signbit(v) ? "-0" : "0";
        return std::to_string(static_cast<long long>(v));
    }
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));  // [-]d[.ddd]e[+-]xx
    std::string out;
    if (s.front() == '-') {
        out += '-';
        s.remove_prefix(1);
    }
    const auto e = s.find('e');
    std::string digits(1, s[0]);
    if (e > 1) digits.append(s.substr(2, e - 2));
    const int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
    const int n = static_cast<int>(digits.size());
    if (exp >= -4 && exp < 16) {
        if (exp < 0) out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
        else if (exp + 1 < n) out += digits.insert(static_cast<std::size_t>(exp + 1), ".");
        else out += digits + std::string(static_cast<std::size_t>(exp + 1 - n), '0');
    } else {
        out += digits[0];
        if (n > 1) out += "." + digits.substr(1);
        out += "e" + std::to_string(exp);
    }
    return out;
}

inline std::string created_now() {
    const char* stamp = std::getenv("SOURCE_DATE_EPOCH");
    bool digits = stamp != nullptr && *stamp != '\0';
    for (const char* p = stamp; digits && *p; ++p) digits = *p >= '0' && *p <= '9';
    const std::time_t secs = digits ? static_cast<std::time_t>(std::strtoll(stamp, nullptr, 10))
                                    : std::time(nullptr);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

inline std::string rle(const std::vector<std::int64_t>& counts) {
    std::string out;
    for (std::size_t i = 0; i < counts.size();) {
        std::size_t j = i;
        while (j < counts.size() && counts[j] == counts[i]) ++j;
        if (!out.empty()) out += ',';
        out += std::to_string(counts[i]);
        if (j - i > 1) out += "*" + std::to_string(j - i);
        i = j;
    }
    return out;
}

// The separator before an execution's values, `executions` after the
// previous one with values (0: the first, none): ";" or "*k;" for k >= 2.
inline std::string gap(std::int64_t executions) {
    if (executions <= 1) return executions == 1 ? ";" : "";
    return "*" + std::to_string(executions) + ";";
}

}  // namespace format

struct Occurrence {
    std::int64_t exec;
    std::int64_t time;
    std::vector<double> metrics;   // per inconsistent key
};

// The rank field of one callpath (the Python side's encode_rank_field), or
// with `from` > 0 its occurrences from `from` to `to` with the separator
// before the first: appended to the field of occ[0, from), it gives the
// field of occ[0, to) (incremental snapshots encode only new values).
inline std::string encode_field(const std::vector<Occurrence>& occ, std::size_t from, std::size_t to) {
    std::string out;
    for (std::size_t i = from; i < to; ++i) {
        if (i > 0 && occ[i].exec == occ[i - 1].exec)
            out += '+';
        else            // the executions it moves on: ';', or '*k;' past those without values
            out += format::gap(occ[i].exec - (i > 0 ? occ[i - 1].exec : 0));
        out += std::to_string(occ[i].time);
        std::size_t used = occ[i].metrics.size();
        while (used > 0 && occ[i].metrics[used - 1] != occ[i].metrics[used - 1]) --used;
        for (std::size_t k = 0; k < used; ++k) {
            out += ',';
            if (occ[i].metrics[k] == occ[i].metrics[k]) out += format::format_value(occ[i].metrics[k]);
        }
    }
    return out;
}

}  // namespace detail
}  // namespace TinyProf

#include "doctor_args.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace hmc::doctor {

namespace {

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string lower(std::string_view text) {
  std::string out;
  for (const char c : text) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// --expect "rdma, CUDA": the names in lower case; an unknown one is a usage error.
std::set<std::string> parse_expect(std::string_view text) {
  std::set<std::string> names, unknown;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string name = lower(trimmed(text.substr(start, comma - start)));
    if (!name.empty()) (name == "rdma" || name == "cuda" || name == "rocm" ? names : unknown).insert(name);
    start = comma + 1;
  }
  if (!unknown.empty()) {
    std::string list;
    for (const auto& u : unknown) list += (list.empty() ? "" : ", ") + u;
    throw std::invalid_argument("--expect: unknown " + list + " (rdma, cuda, rocm)");
  }
  return names;
}

}  // namespace

std::optional<std::size_t> parse_size(std::string_view text) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::size_t i = 0;
  while (i < text.size() && is_space(text[i])) ++i;
  const std::size_t digits_at = i;
  std::uint64_t value = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0; ++i) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (kMax - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (i == digits_at) return std::nullopt;
  while (i < text.size() && is_space(text[i])) ++i;
  unsigned shift = 0;
  if (i < text.size()) {
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
    const std::string_view units = "KMGT";
    if (const auto at = units.find(unit); at != std::string_view::npos) {
      shift = 10 * static_cast<unsigned>(at + 1);
      ++i;
    }
  }
  // An optional "B" or "iB" after the unit ("64MiB", "64MB", "100B").
  const auto next_is = [&](char c) {
    return i < text.size() && std::toupper(static_cast<unsigned char>(text[i])) == c;
  };
  const bool binary = next_is('I');
  if (binary) ++i;
  if (next_is('B')) ++i;
  else if (binary) return std::nullopt;  // "64Mi": an i without its B
  while (i < text.size() && is_space(text[i])) ++i;
  if (i != text.size() || value == 0 || value > (kMax >> shift)) return std::nullopt;
  return static_cast<std::size_t>(value << shift);
}

DoctorArgs parse_doctor_args(int argc, const char* const* argv) {
  DoctorArgs args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> value;
    if (const auto eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    const auto take_value = [&]() -> std::string {
      if (value) return *value;
      if (i + 1 >= argc) throw std::invalid_argument("argument " + flag + ": expected one argument");
      return argv[++i];
    };
    if ((flag == "-h" || flag == "--help") && !value) {
      args.help = true;
    } else if (flag == "--json" && !value) {
      args.json = true;
    } else if (flag == "--expect") {
      args.expect = parse_expect(take_value());
    } else if (flag == "--size") {
      const std::string text = take_value();
      const auto size = parse_size(text);
      if (!size) {
        throw std::invalid_argument("--size: '" + text +
                                    "' is not a size > 0 such as '64M' or '1GiB' (bytes, K, M, G, T; binary units)");
      }
      args.size = *size;
    } else {
      throw std::invalid_argument("unrecognized arguments: " + std::string(argv[i]));
    }
  }
  return args;
}

void check_size_fits_memory(std::size_t size) {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return;  // unknown: the self-test says what fails
  const auto memory = static_cast<double>(pages) * static_cast<double>(page_size);
  if (2.0 * static_cast<double>(size) > memory) {
    std::string why = "--size: the self-test holds two buffers of ";
    why += std::to_string(size);
    why += " bytes, more than this host's ";
    why += std::to_string(static_cast<long long>(memory / (1 << 20)));
    why += " MiB of memory";
    throw std::invalid_argument(why);
  }
}

std::string usage_line() { return "usage: hmc_doctor [-h] [--json] [--expect EXPECT] [--size SIZE]"; }

std::string help_text() {
  std::string text = usage_line();
  text += "\n\n"
          "What this host offers HMC, a loopback self-test of what is actually chosen and how fast, and a\n"
          "warning for every silent fallback it can see; the same report as `python -m hmc doctor`.\n"
          "Exit status: 0 no problem, 1 a problem, 2 a usage error.\n"
          "\n"
          "options:\n"
          "  -h, --help       show this help message and exit\n"
          "  --json           print the report as JSON\n"
          "  --expect EXPECT  comma-separated: rdma, cuda, rocm (a missing one is a problem)\n"
          "  --size SIZE      bytes per put in the self-test (default 64M)\n";
  return text;
}

}  // namespace hmc::doctor

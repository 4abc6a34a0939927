#pragma once
// A JSON value written as Python's json.dumps writes it, so that hmc_doctor's --json output reads
// the same as `python -m hmc doctor --json` to scripts and to people.
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hmc::doctor {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // members in insertion order, as a Python dict

  // Implicit, so that a report is written as the literal it prints: {{"ucx", version}, ...}.
  Json() = default;  // null
  Json(const char* text) : value_(std::string(text)) {}
  Json(std::string text) : value_(std::move(text)) {}
  Json(double number) : value_(number) {}
  Json(std::uint64_t number) : value_(number) {}
  Json(Array items) : value_(std::move(items)) {}
  Json(Object members) : value_(std::move(members)) {}

  // indent < 0: one line with ", " and ": " (json.dumps(v)); else json.dumps(v, indent=indent).
  std::string dump(int indent = -1) const;

  // A float as Python's repr writes it ("3.0", "1.42", "1e+16").
  static std::string float_text(double number);

 private:
  void write(std::string& out, int indent, int depth) const;

  std::variant<std::nullptr_t, std::string, double, std::uint64_t, Array, Object> value_;
};

}  // namespace hmc::doctor

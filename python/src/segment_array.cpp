#include "segment_array.hpp"

#include <bit>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>

#include "hmc/error.hpp"

namespace hmc::python {

namespace {
// How one element is read: its width, and whether it carries a sign.
struct Element {
  std::size_t width = 0;
  bool is_signed = false;
};

// The struct-module format of one native integer ("q", "<q", "=I", ...); width 0 for anything else.
Element element_of(const std::string& format, std::size_t itemsize) {
  std::string f = format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == (std::endian::native == std::endian::little ? '<' : '>')))
    f.erase(0, 1);
  if (f.size() != 1 || std::strchr("bBhHiIlLqQnN", f[0]) == nullptr) return {};
  return {itemsize, std::islower(static_cast<unsigned char>(f[0])) != 0};
}

std::uint64_t read(const std::byte* p, Element e, bool& negative) {
  std::uint64_t u = 0;
  std::memcpy(&u, p, e.width);  // little- or big-endian alike: the low bytes come first on little
  if constexpr (std::endian::native == std::endian::big) u >>= 8 * (8 - e.width);
  if (e.is_signed && e.width < 8 && (u >> (8 * e.width - 1)) != 0) u |= ~std::uint64_t{0} << (8 * e.width);
  negative = e.is_signed && static_cast<std::int64_t>(u) < 0;
  return u;
}
}  // namespace

namespace {
Element integer_element(const pybind11::buffer_info& info, const char* what) {
  const Element e = element_of(info.format, static_cast<std::size_t>(info.itemsize));
  if (e.width == 0 || e.width > 8)
    throw InvalidArgumentError(std::string(what) + " must hold integers in this machine's byte order, not format '" +
                               info.format + "'");
  return e;
}
}  // namespace

std::vector<std::uint64_t> ids_from_array(const pybind11::buffer& array, const char* name) {
  const pybind11::buffer_info info = array.request();
  if (info.ndim != 1)
    throw InvalidArgumentError(std::string(name) + " must be a 1-D array of block ids, not one of " +
                               std::to_string(info.ndim) + " dimensions");
  const Element e = integer_element(info, name);
  const auto n = static_cast<std::size_t>(info.shape[0]);
  std::vector<std::uint64_t> out(n);
  const auto* base = static_cast<const std::byte*>(info.ptr);
  for (std::size_t i = 0; i < n; ++i) {
    bool negative = false;
    out[i] = read(base + static_cast<std::ptrdiff_t>(i) * info.strides[0], e, negative);
    if (negative)
      throw InvalidArgumentError(std::string(name) + "[" + std::to_string(i) + "] must be >= 0, not " +
                                 std::to_string(static_cast<std::int64_t>(out[i])));
  }
  return out;
}

std::vector<Segment> segments_from_array(const pybind11::buffer& array) {
  const pybind11::buffer_info info = array.request();
  if (info.ndim != 2 || info.shape[1] != 3)
    throw InvalidArgumentError("segments must be an (N, 3) array of (local_off, remote_off, nbytes), not one of " +
                               std::to_string(info.ndim) + " dimension(s)" +
                               (info.ndim == 2 ? " with " + std::to_string(info.shape[1]) + " columns" : ""));
  const Element e = integer_element(info, "segments");
  static const char* const kColumn[] = {"local_off", "remote_off", "nbytes"};
  const auto rows = static_cast<std::size_t>(info.shape[0]);
  std::vector<Segment> out(rows);
  const auto* base = static_cast<const std::byte*>(info.ptr);
  for (std::size_t i = 0; i < rows; ++i) {
    std::size_t v[3];
    for (std::size_t j = 0; j < 3; ++j) {
      bool negative = false;
      const std::byte* at =
          base + static_cast<std::ptrdiff_t>(i) * info.strides[0] + static_cast<std::ptrdiff_t>(j) * info.strides[1];
      v[j] = read(at, e, negative);
      if (negative)
        throw InvalidArgumentError("segments[" + std::to_string(i) + "] " + kColumn[j] + " must be >= 0, not " +
                                   std::to_string(static_cast<std::int64_t>(v[j])));
    }
    out[i] = Segment{v[0], v[1], v[2]};
  }
  return out;
}

}  // namespace hmc::python

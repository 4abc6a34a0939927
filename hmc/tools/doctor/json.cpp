#include "json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace hmc::doctor {

namespace {

void append_escape(std::string& out, unsigned code) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\u%04x", code);
  out += buf;
}

// The length of the UTF-8 sequence at text[i] and its code point; 0 when the bytes are not UTF-8.
std::size_t utf8_sequence(std::string_view text, std::size_t i, unsigned& code) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned lead = byte(i);
  std::size_t n = 0;
  if (lead >= 0xC2 && lead < 0xE0) n = 2;
  else if (lead >= 0xE0 && lead < 0xF0) n = 3;
  else if (lead >= 0xF0 && lead < 0xF5) n = 4;
  if (n == 0 || i + n > text.size()) return 0;
  code = lead & (0x7Fu >> n);
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  const bool overlong = (n == 3 && code < 0x800) || (n == 4 && code < 0x10000);
  if (overlong || code > 0x10FFFF || (code >= 0xD800 && code < 0xE000)) return 0;
  return n;
}

// ensure_ascii, as json.dumps: printable ASCII as it is, everything else \uXXXX (UTF-16). A byte
// that is not UTF-8 becomes \udcXX, as Python's surrogateescape reads it from a path or variable.
void append_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\b') {
      out += "\\b";
    } else if (c == '\f') {
      out += "\\f";
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else if (c < 0x80) {
      append_escape(out, c);
    } else {
      unsigned code = 0;
      const std::size_t n = utf8_sequence(text, i, code);
      if (n == 0) {
        append_escape(out, 0xDC00 + c);
      } else if (code >= 0x10000) {
        append_escape(out, 0xD800 + ((code - 0x10000) >> 10));
        append_escape(out, 0xDC00 + ((code - 0x10000) & 0x3FF));
      } else {
        append_escape(out, code);
      }
      i += n == 0 ? 1 : n;
      continue;
    }
    ++i;
  }
  out += '"';
}

void newline(std::string& out, int indent, int depth) {
  out += '\n';
  out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(depth), ' ');
}

}  // namespace

std::string Json::float_text(double number) {
  if (std::isnan(number)) return "NaN";
  if (std::isinf(number)) return number > 0 ? "Infinity" : "-Infinity";
  // The shortest digits that read back as `number`, placed as repr places them: positional for
  // decimal exponents in [-4, 16), else d.ddde+XX.
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, number, std::chars_format::scientific);
  if (ec != std::errc{}) return "NaN";
  const std::string_view sci(buf, static_cast<std::size_t>(end - buf));
  const std::size_t e_at = sci.find('e');
  const int exponent = std::atoi(std::string(sci.substr(e_at + 1)).c_str());
  if (exponent < -4 || exponent >= 16) return std::string(sci);
  const bool negative = sci.front() == '-';
  std::string digits(sci.substr(negative ? 1 : 0, e_at - (negative ? 1 : 0)));
  std::erase(digits, '.');
  // Appended piece by piece: GCC 12 -O3 misfires -Wrestrict on "literal" + string here.
  std::string text = negative ? "-" : "";
  if (exponent < 0) {
    text += "0.";
    text.append(static_cast<std::size_t>(-exponent - 1), '0');
    text += digits;
  } else {
    const auto whole = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() < whole) digits.append(whole - digits.size(), '0');
    text.append(digits, 0, whole);
    text += '.';
    text += digits.size() > whole ? digits.substr(whole) : "0";
  }
  return text;
}

std::string Json::dump(int indent) const {
  std::string out;
  write(out, indent, 0);
  return out;
}

void Json::write(std::string& out, int indent, int depth) const {
  if (std::holds_alternative<std::nullptr_t>(value_)) {
    out += "null";
  } else if (const auto* text = std::get_if<std::string>(&value_)) {
    append_string(out, *text);
  } else if (const auto* number = std::get_if<double>(&value_)) {
    out += float_text(*number);
  } else if (const auto* whole = std::get_if<std::uint64_t>(&value_)) {
    out += std::to_string(*whole);
  } else if (const auto* items = std::get_if<Array>(&value_)) {
    if (items->empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < items->size(); ++i) {
      if (i > 0) out += indent < 0 ? ", " : ",";
      if (indent >= 0) newline(out, indent, depth + 1);
      (*items)[i].write(out, indent, depth + 1);
    }
    if (indent >= 0) newline(out, indent, depth);
    out += ']';
  } else if (const auto* members = std::get_if<Object>(&value_)) {
    if (members->empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (std::size_t i = 0; i < members->size(); ++i) {
      if (i > 0) out += indent < 0 ? ", " : ",";
      if (indent >= 0) newline(out, indent, depth + 1);
      append_string(out, (*members)[i].first);
      out += ": ";
      (*members)[i].second.write(out, indent, depth + 1);
    }
    if (indent >= 0) newline(out, indent, depth);
    out += '}';
  }
}

}  // namespace hmc::doctor

#pragma once
// Standard base64 with padding (etcd's JSON carries keys and values in it).
#include <string>

namespace hmc::detail {

std::string base64_encode(const std::string& in);
// False when `in` is not canonical base64 (bad length, alphabet, padding or padding bits).
bool base64_decode(const std::string& in, std::string& out);

}  // namespace hmc::detail

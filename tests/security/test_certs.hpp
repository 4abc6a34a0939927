#pragma once
// Throw-away certificates for TLS tests, made with the openssl CLI in a temporary folder: CAs,
// certificates they sign, an encrypted copy of a key and a revocation list.
#include <cstdlib>
#include <string>

namespace hmc::test {

inline bool run_quietly(const std::string& dir, const std::string& cmd) {
  return std::system(("cd " + dir + " && (" + cmd + ") >/dev/null 2>&1").c_str()) == 0;
}

// <node>.pem and <node>.key (mode 0600), signed by the CA in <ca>-ca.pem / <ca>-ca.key.
inline bool make_node(const std::string& dir, const std::string& ca, const std::string& node) {
  return run_quietly(dir, "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + node +
                              ".key -out " + node + ".csr -subj /CN=" + node + " && openssl x509 -req -in " + node +
                              ".csr -CA " + ca + "-ca.pem -CAkey " + ca + "-ca.key -CAcreateserial -out " + node +
                              ".pem -days 1 && chmod 600 " + node + ".key");
}

// A CA (<name>-ca.pem, <name>-ca.key) and one certificate it signs (<name>.pem, <name>.key).
inline bool make_ca_and_node(const std::string& dir, const std::string& name) {
  return run_quietly(dir, "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + name +
                              "-ca.key -out " + name + "-ca.pem -days 1 -subj /CN=" + name + "-ca") &&
         make_node(dir, name, name);
}

// <node>-enc.key: <node>.key encrypted (AES-256) under `password`.
inline bool encrypt_key(const std::string& dir, const std::string& node, const std::string& password) {
  return run_quietly(
      dir, "openssl pkey -in " + node + ".key -aes256 -passout pass:" + password + " -out " + node + "-enc.key");
}

// <ca>-crl.pem: the CA's revocation list with `node`'s certificate revoked.
inline bool revoke(const std::string& dir, const std::string& ca, const std::string& node) {
  return run_quietly(dir, "printf '[ca]\\ndefault_ca=d\\n[d]\\ndatabase=" + ca + "-index.txt\\ncrlnumber=" + ca +
                              "-crlnumber\\ndefault_md=sha256\\ndefault_crl_days=1\\n' > " + ca + "-ca.cnf && : > " +
                              ca + "-index.txt && echo 01 > " + ca + "-crlnumber && openssl ca -batch -config " + ca +
                              "-ca.cnf -keyfile " + ca + "-ca.key -cert " + ca + "-ca.pem -revoke " + node +
                              ".pem && openssl ca -batch -config " + ca + "-ca.cnf -keyfile " + ca + "-ca.key -cert " +
                              ca + "-ca.pem -gencrl -out " + ca + "-crl.pem");
}

}  // namespace hmc::test

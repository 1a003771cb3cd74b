// Certificates for the TLS tests, made with libcrypto (no openssl command needed): a CA,
// certificates it signed, and a second CA with its own certificate (a stranger's).
//
//   TestPki pki;                      // a fresh directory under /tmp, removed at the end
//   pki.config("a")                   // {a.pem, a.key, ca.pem}: a job member
//   pki.stranger()                    // {stranger.pem, stranger.key, ca.pem}: signed by
//                                     // another CA, so the job refuses it
//   pki.expired("old")                // signed by the job's CA, but no longer valid
// Link the test with OpenSSL::Crypto. Throws std::runtime_error when libcrypto fails.
// Thread-safe: threads of a test may each issue their own certificate.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>

#include "net/tls.h"

namespace tdist::testing {

class TestPki {
 public:
  TestPki() {
    char tmpl[] = "/tmp/tdist_pki_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    ca_ = make("ca", nullptr, nullptr, 1);
    other_ca_ = make("other_ca", nullptr, nullptr, 1);
  }
  ~TestPki() {
    EVP_PKEY_free(ca_.key);
    X509_free(ca_.cert);
    EVP_PKEY_free(other_ca_.key);
    X509_free(other_ca_.cert);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  const std::string& dir() const { return dir_; }
  std::string ca_file() const { return dir_ + "/ca.pem"; }

  // A certificate and key for `name`, signed by the job's CA.
  net::tls::Config config(const std::string& name) { return issue(name, ca_, 1); }
  // Signed by another CA.
  net::tls::Config stranger() { return issue("stranger", other_ca_, 1); }
  // Signed by the job's CA, expired yesterday.
  net::tls::Config expired(const std::string& name) { return issue(name, ca_, -1); }

 private:
  struct Pair {
    EVP_PKEY* key = nullptr;
    X509* cert = nullptr;
  };

  static void check(bool ok, const char* what) {
    if (!ok) throw std::runtime_error(std::string("test PKI: ") + what + " failed");
  }

  net::tls::Config issue(const std::string& name, const Pair& ca, int days) {
    std::lock_guard<std::mutex> lock(mutex_);  // serial_, and one writer per file
    Pair p = make(name, ca.key, ca.cert, days);
    EVP_PKEY_free(p.key);
    X509_free(p.cert);
    return {dir_ + "/" + name + ".pem", dir_ + "/" + name + ".key", ca_file()};
  }

  // A P-256 key and a certificate for it, signed by `issuer_key` (self-signed when null),
  // valid from a day ago for `days` days (negative: ended that many days ago), written to
  // <dir>/<name>.pem and <name>.key (0600).
  Pair make(const std::string& name, EVP_PKEY* issuer_key, X509* issuer, int days) {
    Pair p;
    p.key = EVP_EC_gen("P-256");
    check(p.key != nullptr, "EVP_EC_gen");
    p.cert = X509_new();
    check(p.cert != nullptr, "X509_new");
    X509_set_version(p.cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(p.cert), ++serial_);
    const long day = 24L * 3600;
    X509_gmtime_adj(X509_getm_notBefore(p.cert), days > 0 ? -day : (days - 2) * day);
    X509_gmtime_adj(X509_getm_notAfter(p.cert), days * day);
    X509_set_pubkey(p.cert, p.key);
    X509_NAME* subject = X509_get_subject_name(p.cert);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
    X509_set_issuer_name(p.cert, issuer != nullptr ? X509_get_subject_name(issuer) : subject);
    if (issuer == nullptr) add_ca_extension(p.cert);
    check(X509_sign(p.cert, issuer_key != nullptr ? issuer_key : p.key, EVP_sha256()) > 0,
          "X509_sign");
    write_pem(dir_ + "/" + name + ".pem", [&](FILE* f) { return PEM_write_X509(f, p.cert); });
    const std::string key_file = dir_ + "/" + name + ".key";
    write_pem(key_file, [&](FILE* f) {
      return PEM_write_PrivateKey(f, p.key, nullptr, nullptr, 0, nullptr, nullptr);
    });
    ::chmod(key_file.c_str(), 0600);
    return p;
  }

  static void add_ca_extension(X509* cert) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext =
        X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "critical,CA:TRUE");
    check(ext != nullptr, "X509V3_EXT_conf_nid");
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }

  template <typename Write>
  static void write_pem(const std::string& path, Write write) {
    FILE* f = std::fopen(path.c_str(), "w");
    check(f != nullptr, "fopen");
    const bool ok = write(f) == 1;
    std::fclose(f);
    check(ok, "PEM write");
  }

  std::string dir_;
  Pair ca_;
  Pair other_ca_;
  std::mutex mutex_;
  long serial_ = 0;
};

}  // namespace tdist::testing

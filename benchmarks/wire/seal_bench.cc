// deltacast-bench seal: how fast each AES-GCM library this build and CPU can use (core/trust/
// aes_gcm.h) tags (GMAC: the payload as associated data, authenticated mode) and encrypts
// (encrypted mode) a payload in pieces, as a rail end seals a slice, against memcpy of the same
// pieces in the same run. The buffer is small enough to stay in cache by default, as a piece is
// right after the socket copied it; --buffer larger than the caches measures from memory.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_commands.h"
#include "cli/bench_util.h"
#include "core/aligned_buffer.h"
#include "core/trust/aes_gcm.h"

namespace deltacast::bench {
namespace {

struct SealArgs {
  uint64_t bytes = 1ull << 30;  // sealed per repetition
  uint64_t piece = 64 << 10;
  uint64_t buffer = 1 << 20;  // the pieces cycle through this much memory
  int reps = 5;
  std::string library = "all";
  bool json = false;
};

// One repetition: `args.bytes` through `work(in, out, n)` in pieces cycling over the buffer.
template <typename Work>
double rate(const SealArgs& args, const uint8_t* in, uint8_t* out, Work&& work) {
  const uint64_t pieces_in_buffer = std::max<uint64_t>(1, args.buffer / args.piece);
  const double s = time_seconds([&] {
    uint64_t i = 0;
    for (uint64_t done = 0; done < args.bytes; done += args.piece, ++i) {
      const uint64_t at = (i % pieces_in_buffer) * args.piece;
      work(in + at, out + at, args.piece);
    }
  });
  return gbps(static_cast<double>(args.bytes), s);
}

int run_seal(const SealArgs& args) {
  if (args.piece == 0 || args.piece > args.buffer) {
    return command_failed("seal", invalid_argument("--piece ({}) must be between 1 and --buffer ({})", args.piece,
                                                   args.buffer));
  }
  std::vector<trust::AesGcmLibrary> libraries;
  if (args.library == "all") {
    libraries = trust::usable_aes_gcm_libraries();
  } else {
    auto library = trust::parse_aes_gcm_library(args.library);
    if (!library.ok()) return command_failed("seal", library.status());
    libraries = {*library};
  }
  AlignedBuffer in(args.buffer), out(args.buffer);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < args.buffer; ++i) in.data()[i] = static_cast<uint8_t>(rng());
  trust::Key key{};
  for (auto& b : key) b = static_cast<uint8_t>(rng());
  const uint8_t header[40] = {};

  std::vector<std::unique_ptr<trust::AesGcm>> gcms;
  for (trust::AesGcmLibrary library : libraries) {
    try {
      gcms.push_back(trust::make_aes_gcm(key, library));
    } catch (const std::invalid_argument& e) {
      return command_failed("seal", failed_precondition("{}", e.what()));
    }
  }
  using Payload = trust::AesGcm::Payload;
  // Per repetition, every measure in turn, so the machine's noise falls on all of them alike.
  std::vector<double> copy_rates;
  std::vector<std::vector<double>> tag_rates(gcms.size()), encrypt_rates(gcms.size());
  Progress progress(!args.json);
  for (int r = 0; r < args.reps + 1; ++r) {  // the first repetition warms up and is not counted
    progress.update(fmt::format("repetition {}/{}", r, args.reps));
    const double copy = rate(args, in.data(), out.data(), [](const uint8_t* i, uint8_t* o, size_t n) {
      std::memcpy(o, i, n);
    });
    std::vector<double> tags, encrypts;
    for (auto& gcm : gcms) {
      uint8_t iv[trust::AesGcm::kIvBytes] = {};
      uint8_t tag[trust::AesGcm::kTagBytes];
      uint64_t message = 0;
      // A message per piece, as a frame per slice piece would be at the most: the per-message cost counts.
      tags.push_back(rate(args, in.data(), out.data(), [&](const uint8_t* i, uint8_t*, size_t n) {
        std::memcpy(iv + 4, &++message, sizeof(message));
        gcm->start(true, iv, header, sizeof(header), Payload::kTagged);
        gcm->add(i, nullptr, n);
        gcm->tag(tag);
      }));
      encrypts.push_back(rate(args, in.data(), out.data(), [&](const uint8_t* i, uint8_t* o, size_t n) {
        std::memcpy(iv + 4, &++message, sizeof(message));
        gcm->start(true, iv, header, sizeof(header), Payload::kEncrypted);
        gcm->add(i, o, n);
        gcm->tag(tag);
      }));
    }
    if (r == 0) continue;
    copy_rates.push_back(copy);
    for (size_t g = 0; g < gcms.size(); ++g) {
      tag_rates[g].push_back(tags[g]);
      encrypt_rates[g].push_back(encrypts[g]);
    }
  }
  progress.finish();

  const double copy = median(copy_rates);
  nlohmann::json report = {{"bytes", args.bytes},
                           {"piece_bytes", args.piece},
                           {"buffer_bytes", args.buffer},
                           {"reps", args.reps},
                           {"memcpy_gbps", copy},
                           {"libraries", nlohmann::json::array()}};
  if (!args.json) {
    fmt::print("pieces of {} cycling over {}, {} per repetition, medians of {}: memcpy {:.2f} GB/s\n",
               human_bytes(static_cast<double>(args.piece)), human_bytes(static_cast<double>(args.buffer)),
               human_bytes(static_cast<double>(args.bytes)), args.reps, copy);
  }
  // Each library against OpenSSL's in the same run, where OpenSSL was measured.
  const size_t openssl = static_cast<size_t>(
      std::find(libraries.begin(), libraries.end(), trust::AesGcmLibrary::kOpenSsl) - libraries.begin());
  const double openssl_tag = openssl < gcms.size() ? median(tag_rates[openssl]) : 0.0;
  const double openssl_encrypt = openssl < gcms.size() ? median(encrypt_rates[openssl]) : 0.0;
  for (size_t g = 0; g < gcms.size(); ++g) {
    const double tag = median(tag_rates[g]), encrypt = median(encrypt_rates[g]);
    nlohmann::json row = {{"library", std::string(trust::aes_gcm_library_name(libraries[g]))},
                          {"gmac_gbps", tag},
                          {"aes_gcm_gbps", encrypt},
                          {"gmac_vs_memcpy", tag / copy},
                          {"aes_gcm_vs_memcpy", encrypt / copy}};
    if (openssl_tag > 0) {
      row["gmac_vs_openssl"] = tag / openssl_tag;
      row["aes_gcm_vs_openssl"] = encrypt / openssl_encrypt;
    }
    if (!args.json) {
      fmt::print("  {:9} GMAC {:6.2f} GB/s ({:.2f}x memcpy), AES-256-GCM {:6.2f} GB/s ({:.2f}x memcpy)",
                 row["library"].get<std::string>(), tag, tag / copy, encrypt, encrypt / copy);
      if (openssl_tag > 0) fmt::print("; {:.2f}x and {:.2f}x OpenSSL's", tag / openssl_tag, encrypt / openssl_encrypt);
      fmt::print("\n");
    }
    report["libraries"].push_back(std::move(row));
  }
  if (args.json) fmt::print("{}\n", report.dump());
  return 0;
}

}  // namespace

void add_seal_command(CLI::App& app) {
  auto args = std::make_shared<SealArgs>();
  CLI::App* cmd = app.add_subcommand(
      "seal", "Tag and encrypt pieces with each AES-GCM library, against memcpy of the same pieces");
  cmd->add_option("--bytes", args->bytes, "Bytes sealed per repetition")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--piece", args->piece, "Bytes per message (a rail end seals a slice in pieces of 256 KiB)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--buffer", args->buffer,
                  "Memory the pieces cycle through (the default stays in cache; 256 MiB and more measures memory)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--reps", args->reps, "Repetitions (medians reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--library", args->library, "all (every usable one), ipsec-mb or openssl")
      ->capture_default_str()
      ->check(CLI::IsMember({"all", "ipsec-mb", "openssl"}));
  cmd->add_flag("--json", args->json, "JSON output");
  cmd->callback([args] { throw CLI::RuntimeError(run_seal(*args)); });
}

}  // namespace deltacast::bench

// XXH3-64, written from the xxHash specification as plain integer code that
// compiles for the host and for CUDA devices. The CPU uses libxxhash; this
// version exists so that GPU kernels compute the very same content hashes,
// and the unit tests hold it to libxxhash's output on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace deltacast::xxh3 {

inline constexpr uint32_t kPrime32_1 = 0x9E3779B1u;
inline constexpr uint32_t kPrime32_2 = 0x85EBCA77u;
inline constexpr uint32_t kPrime32_3 = 0xC2B2AE3Du;
inline constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull;
inline constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ull;
inline constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ull;
inline constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ull;
inline constexpr uint64_t kPrimeMx1 = 0x165667919E3779F9ull;
inline constexpr uint64_t kPrimeMx2 = 0x9FB21C651E98DF25ull;
inline constexpr size_t kSecretBytes = 192;
inline constexpr size_t kStripeBytes = 64;
inline constexpr size_t kStripesPerBlock = (kSecretBytes - kStripeBytes) / 8;  // 16
inline constexpr size_t kBlockBytes = kStripeBytes * kStripesPerBlock;         // 1024

// The specification's default secret.
struct Secret {
  uint8_t bytes[kSecretBytes];
};
inline constexpr Secret kDefaultSecret = {{
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4, 0x6d,
    0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0,
    0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0,
    0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b,
    0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac,
    0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51,
    0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34,
    0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49,
    0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8,
    0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b,
    0x40, 0x7e,
}};

#if defined(__CUDACC__)
// Device code reads the secret from constant memory (namespace-scope host constants are not visible there).
static __constant__ Secret kDeviceDefaultSecret = kDefaultSecret;
#endif

DC_HOST_DEVICE inline const uint8_t* default_secret() {
#if defined(__CUDA_ARCH__)
  return kDeviceDefaultSecret.bytes;
#else
  return kDefaultSecret.bytes;
#endif
}

// Little-endian reads, byte by byte: device inputs are not 8-byte aligned in general.
DC_HOST_DEVICE inline uint32_t read32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
DC_HOST_DEVICE inline uint64_t read64(const uint8_t* p) {
  return static_cast<uint64_t>(read32(p)) | static_cast<uint64_t>(read32(p + 4)) << 32;
}
DC_HOST_DEVICE inline uint32_t bswap32(uint32_t x) {
  return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}
DC_HOST_DEVICE inline uint64_t bswap64(uint64_t x) {
  return static_cast<uint64_t>(bswap32(static_cast<uint32_t>(x))) << 32 | bswap32(static_cast<uint32_t>(x >> 32));
}
DC_HOST_DEVICE inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Low half XOR high half of the 128-bit product.
DC_HOST_DEVICE inline uint64_t mul128_fold64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ __umul64hi(a, b);
#else
  __extension__ using u128 = unsigned __int128;  // GCC/Clang extension; silences -Wpedantic
  const u128 p = static_cast<u128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}

DC_HOST_DEVICE inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= kPrimeMx1;
  return h ^ (h >> 32);
}

DC_HOST_DEVICE inline uint64_t avalanche_xxh64(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  return h ^ (h >> 32);
}

DC_HOST_DEVICE inline uint64_t mix16(const uint8_t* in, const uint8_t* secret, uint64_t seed) {
  return mul128_fold64(read64(in) ^ (read64(secret) + seed), read64(in + 8) ^ (read64(secret + 8) - seed));
}

DC_HOST_DEVICE inline uint64_t hash_0to16(const uint8_t* in, size_t len, const uint8_t* secret, uint64_t seed) {
  if (len > 8) {
    const uint64_t low = ((read64(secret + 24) ^ read64(secret + 32)) + seed) ^ read64(in);
    const uint64_t high = ((read64(secret + 40) ^ read64(secret + 48)) - seed) ^ read64(in + len - 8);
    return avalanche(len + bswap64(low) + high + mul128_fold64(low, high));
  }
  if (len >= 4) {
    const uint64_t modified_seed = seed ^ (static_cast<uint64_t>(bswap32(static_cast<uint32_t>(seed))) << 32);
    const uint64_t combined = static_cast<uint64_t>(read32(in + len - 4)) | static_cast<uint64_t>(read32(in)) << 32;
    uint64_t v = ((read64(secret + 8) ^ read64(secret + 16)) - modified_seed) ^ combined;
    v ^= rotl64(v, 49) ^ rotl64(v, 24);
    v *= kPrimeMx2;
    v ^= (v >> 35) + len;
    v *= kPrimeMx2;
    return v ^ (v >> 28);
  }
  if (len > 0) {
    const uint32_t combined = static_cast<uint32_t>(in[len - 1]) | static_cast<uint32_t>(len) << 8 |
                              static_cast<uint32_t>(in[0]) << 16 | static_cast<uint32_t>(in[len >> 1]) << 24;
    return avalanche_xxh64((static_cast<uint64_t>(read32(secret) ^ read32(secret + 4)) + seed) ^ combined);
  }
  return avalanche_xxh64(seed ^ read64(secret + 56) ^ read64(secret + 64));
}

DC_HOST_DEVICE inline uint64_t hash_17to128(const uint8_t* in, size_t len, const uint8_t* secret, uint64_t seed) {
  uint64_t acc = len * kPrime64_1;
  const size_t rounds = ((len - 1) >> 5) + 1;
  for (size_t r = rounds; r-- > 0;) {
    acc += mix16(in + r * 16, secret + r * 32, seed);
    acc += mix16(in + len - r * 16 - 16, secret + r * 32 + 16, seed);
  }
  return avalanche(acc);
}

DC_HOST_DEVICE inline uint64_t hash_129to240(const uint8_t* in, size_t len, const uint8_t* secret, uint64_t seed) {
  uint64_t acc = len * kPrime64_1;
  for (size_t i = 0; i < 8; ++i) acc += mix16(in + i * 16, secret + i * 16, seed);
  acc = avalanche(acc);
  const size_t chunks = len >> 4;
  for (size_t i = 8; i < chunks; ++i) acc += mix16(in + i * 16, secret + (i - 8) * 16 + 3, seed);
  acc += mix16(in + len - 16, secret + 119, seed);
  return avalanche(acc);
}

DC_HOST_DEVICE inline void accumulate_stripe(uint64_t* acc, const uint8_t* stripe, const uint8_t* secret) {
  for (int i = 0; i < 8; ++i) {
    const uint64_t data = read64(stripe + 8 * i);
    const uint64_t key = data ^ read64(secret + 8 * i);
    acc[i ^ 1] += data;
    acc[i] += (key & 0xffffffffu) * (key >> 32);
  }
}

DC_HOST_DEVICE inline void scramble(uint64_t* acc, const uint8_t* secret) {
  for (int i = 0; i < 8; ++i) {
    uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= read64(secret + kSecretBytes - kStripeBytes + 8 * i);
    acc[i] = a * kPrime32_1;
  }
}

DC_HOST_DEVICE inline uint64_t hash_large(const uint8_t* in, size_t len, const uint8_t* secret) {
  uint64_t acc[8] = {kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3, kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1};
  const size_t full_blocks = (len - 1) / kBlockBytes;  // the last block is kept for the final round
  for (size_t b = 0; b < full_blocks; ++b) {
    for (size_t s = 0; s < kStripesPerBlock; ++s) {
      accumulate_stripe(acc, in + b * kBlockBytes + s * kStripeBytes, secret + s * 8);
    }
    scramble(acc, secret);
  }
  const uint8_t* last = in + full_blocks * kBlockBytes;
  const size_t last_len = len - full_blocks * kBlockBytes;
  const size_t stripes = (last_len - 1) / kStripeBytes;
  for (size_t s = 0; s < stripes; ++s) accumulate_stripe(acc, last + s * kStripeBytes, secret + s * 8);
  accumulate_stripe(acc, in + len - kStripeBytes, secret + kSecretBytes - 71);
  uint64_t result = len * kPrime64_1;
  for (int i = 0; i < 4; ++i) {
    result += mul128_fold64(acc[2 * i] ^ read64(secret + 11 + 16 * i), acc[2 * i + 1] ^ read64(secret + 11 + 16 * i + 8));
  }
  return avalanche(result);
}

// The secret a seed derives for inputs above 240 bytes.
DC_HOST_DEVICE inline Secret derive_secret(uint64_t seed) {
  Secret s;
  const uint8_t* base = default_secret();
  for (int i = 0; i < 12; ++i) {
    const uint64_t lo = read64(base + 16 * i) + seed;
    const uint64_t hi = read64(base + 16 * i + 8) - seed;
    for (int k = 0; k < 8; ++k) {
      s.bytes[16 * i + k] = static_cast<uint8_t>(lo >> (8 * k));
      s.bytes[16 * i + 8 + k] = static_cast<uint8_t>(hi >> (8 * k));
    }
  }
  return s;
}

// XXH3_64bits_withSeed(in, len, seed).
DC_HOST_DEVICE inline uint64_t hash64(const void* data, size_t len, uint64_t seed) {
  const auto* in = static_cast<const uint8_t*>(data);
  const uint8_t* secret = default_secret();
  if (len <= 16) return hash_0to16(in, len, secret, seed);
  if (len <= 128) return hash_17to128(in, len, secret, seed);
  if (len <= 240) return hash_129to240(in, len, secret, seed);
  if (seed == 0) return hash_large(in, len, secret);
  const Secret derived = derive_secret(seed);
  return hash_large(in, len, derived.bytes);
}

}  // namespace deltacast::xxh3

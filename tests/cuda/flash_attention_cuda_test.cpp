// The CUDA dense and block-sparse attention kernel against a float64 reference computed here on
// the host from the same bf16 inputs, with the token-level mask built straight from the block
// lists' definition. Fresh random inputs per case, outputs poisoned (NaN) before each launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "attention/cuda/flash_attention.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "cuda_test_support.h"

using namespace mmgen;
using namespace mmgen::cuda;
using namespace mmgen::cuda_testing;

namespace {

struct Case {
  int64_t batch, heads, seq_q, seq_k, head_dim;
  bool sparse;
  bool packed_qkv;  // q, k, v interleaved in one [B, S, 3, H, D] buffer (strided views)
  // Block-sparse only: random valid lengths per key block (padded edge tiles) and lists per 64
  // query rows instead of 128.
  bool lengths_and_halves = false;
  // out_rows: query row r written to output row Sq − 1 − r, and every row r ≡ 3 (mod 7) not
  // written at all (its target row must stay untouched).
  bool scattered_out = false;
};

// Block lists: each (b, h, query block) keeps each key block with probability `density`; some
// query blocks get none (their rows must come out zero with LSE -inf).
struct BlockLists {
  std::vector<int32_t> offsets, indices, key_lengths;
};
int64_t rows_per_list(const Case& c) {
  return c.lengths_and_halves ? kFlashBlockM / 2 : kFlashBlockM;
}
BlockLists random_block_lists(const Case& c, double density, std::mt19937& generator) {
  const int64_t q_blocks = (c.seq_q + rows_per_list(c) - 1) / rows_per_list(c);
  const int64_t k_blocks = (c.seq_k + kFlashBlockN - 1) / kFlashBlockN;
  std::uniform_real_distribution<double> uniform;
  BlockLists lists;
  lists.offsets.push_back(0);
  for (int64_t i = 0; i < c.batch * c.heads * q_blocks; ++i) {
    std::vector<int32_t> kept;
    for (int32_t kb = 0; kb < k_blocks; ++kb)
      if (uniform(generator) < density) kept.push_back(kb);
    std::shuffle(kept.begin(), kept.end(), generator);  // order must not matter
    lists.indices.insert(lists.indices.end(), kept.begin(), kept.end());
    lists.offsets.push_back(int32_t(lists.indices.size()));
  }
  if (c.lengths_and_halves) {
    std::uniform_int_distribution<int> length(0, kFlashBlockN);
    for (int64_t kb = 0; kb < k_blocks; ++kb)
      lists.key_lengths.push_back(kb % 3 == 0 ? kFlashBlockN : length(generator));
  }
  return lists;
}

void run_case(const Case& c, FlashKernel kernel, std::mt19937& generator) {
  const int64_t B = c.batch, H = c.heads, Sq = c.seq_q, Sk = c.seq_k, D = c.head_dim;
  // Host layouts: q [B, Sq, H, D], k/v [B, Sk, H, D] (or packed [B, S, 3, H, D] when Sq == Sk).
  const int64_t token_stride = c.packed_qkv ? 3 * H * D : H * D;
  const Bf16Values q = random_bf16(size_t(B * Sq * token_stride), generator);
  const Bf16Values kv =
      c.packed_qkv ? Bf16Values{} : random_bf16(size_t(2 * B * Sk * H * D), generator);
  const float scale = 1.0f / std::sqrt(float(D));

  auto q_at = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    return double(q.values[size_t((b * Sq + s) * token_stride + h * D + d)]);
  };
  auto k_at = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    if (c.packed_qkv)
      return double(q.values[size_t((b * Sk + s) * token_stride + H * D + h * D + d)]);
    return double(kv.values[size_t(((b * Sk + s) * H + h) * D + d)]);
  };
  auto v_at = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    if (c.packed_qkv)
      return double(q.values[size_t((b * Sk + s) * token_stride + 2 * H * D + h * D + d)]);
    return double(kv.values[size_t(B * Sk * H * D + ((b * Sk + s) * H + h) * D + d)]);
  };

  BlockLists lists;
  if (c.sparse) lists = random_block_lists(c, 0.35, generator);
  const int64_t q_blocks = (Sq + rows_per_list(c) - 1) / rows_per_list(c);
  // allowed(b, h, i, j): the key's block is in the list of the query's block.
  auto allowed = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!c.sparse) return true;
    const int64_t entry = (b * H + h) * q_blocks + i / rows_per_list(c);
    for (int32_t p = lists.offsets[entry]; p < lists.offsets[entry + 1]; ++p) {
      if (lists.indices[p] != j / kFlashBlockN) continue;
      return !c.lengths_and_halves ||
             j % kFlashBlockN < lists.key_lengths[size_t(j / kFlashBlockN)];
    }
    return false;
  };

  // Reference in float64.
  std::vector<double> expected(size_t(B * Sq * H * D)), expected_lse(size_t(B * H * Sq));
  std::vector<double> scores(static_cast<size_t>(Sk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Sk; ++j) {
          if (!allowed(b, h, i, j)) {
            scores[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q_at(b, i, h, d) * k_at(b, j, h, d);
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j)
          sum += std::isinf(scores[j]) ? 0.0 : std::exp(scores[j] - max_score);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < Sk; ++j)
            if (!std::isinf(scores[j])) o += std::exp(scores[j] - max_score) * v_at(b, j, h, d);
          expected[size_t(((b * Sq + i) * H + h) * D + d)] = sum > 0 ? o / sum : 0.0;
        }
        expected_lse[size_t((b * H + h) * Sq + i)] =
            sum > 0 ? max_score + std::log(sum) : -std::numeric_limits<double>::infinity();
      }

  // Device run.
  DeviceBuffer device_q(q.bits.size() * 2), device_kv(std::max<size_t>(kv.bits.size(), 1) * 2);
  device_q.upload(q.bits.data(), q.bits.size() * 2);
  if (!c.packed_qkv) device_kv.upload(kv.bits.data(), kv.bits.size() * 2);
  DeviceBuffer device_out(size_t(B * Sq * H * D) * 2), device_lse(size_t(B * H * Sq) * 4);
  device_out.fill_bytes(0xff);  // bf16 0xffff is NaN: an unwritten element cannot pass
  device_lse.fill_bytes(0xff);
  DeviceBuffer device_offsets, device_indices, device_lengths;

  FlashAttentionArgs args;
  args.batch = B, args.heads = H, args.seq_q = Sq, args.seq_k = Sk, args.head_dim = D;
  args.scale = scale;
  args.kernel = kernel;
  const auto* q_base = device_q.as<uint16_t>();
  if (c.packed_qkv) {
    args.q = q_base;
    args.k = q_base + H * D;
    args.v = q_base + 2 * H * D;
    args.q_strides = args.k_strides = args.v_strides = {Sq * token_stride, token_stride, D};
  } else {
    args.q = q_base;
    args.k = device_kv.as<uint16_t>();
    args.v = device_kv.as<uint16_t>() + B * Sk * H * D;
    args.q_strides = {Sq * H * D, H * D, D};
    args.k_strides = args.v_strides = {Sk * H * D, H * D, D};
  }
  args.out = device_out.data();
  args.out_strides = {Sq * H * D, H * D, D};
  args.lse = device_lse.as<float>();
  if (c.sparse) {
    device_offsets = DeviceBuffer(lists.offsets.size() * 4);
    device_offsets.upload(lists.offsets.data(), lists.offsets.size() * 4);
    device_indices = DeviceBuffer(std::max<size_t>(lists.indices.size(), 1) * 4);
    if (!lists.indices.empty())
      device_indices.upload(lists.indices.data(), lists.indices.size() * 4);
    args.block_offsets = device_offsets.as<int32_t>();
    args.block_indices = device_indices.as<int32_t>();
    if (c.lengths_and_halves) {
      device_lengths = DeviceBuffer(lists.key_lengths.size() * 4);
      device_lengths.upload(lists.key_lengths.data(), lists.key_lengths.size() * 4);
      args.key_block_lengths = device_lengths.as<int32_t>();
      args.lists_per_half = true;
    }
  }
  std::vector<int32_t> out_rows;
  DeviceBuffer device_out_rows;
  if (c.scattered_out) {
    for (int64_t r = 0; r < Sq; ++r) out_rows.push_back(r % 7 == 3 ? -1 : int32_t(Sq - 1 - r));
    device_out_rows = DeviceBuffer(out_rows.size() * 4);
    device_out_rows.upload(out_rows.data(), out_rows.size() * 4);
    args.out_rows = device_out_rows.as<int32_t>();
  }
  flash_attention_forward(args);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<uint16_t> out_bits(size_t(B * Sq * H * D));
  std::vector<float> lse(size_t(B * H * Sq));
  device_out.download(out_bits.data(), out_bits.size() * 2);
  device_lse.download(lse.data(), lse.size() * 4);
  std::vector<double> actual, wanted;
  bool all_finite = true, untouched = true;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < Sq; ++r) {
      const int64_t target = c.scattered_out ? out_rows[size_t(r)] : r;
      for (int64_t e = 0; e < H * D; ++e) {
        if (target < 0) {  // row Sq − 1 − r is nobody's target: still the 0xffff fill
          untouched = untouched && out_bits[size_t((b * Sq + Sq - 1 - r) * H * D + e)] == 0xffff;
          continue;
        }
        actual.push_back(bf16_to_f32(out_bits[size_t((b * Sq + target) * H * D + e)]));
        wanted.push_back(expected[size_t((b * Sq + r) * H * D + e)]);
        all_finite = all_finite && std::isfinite(actual.back());
      }
    }
  double lse_error = 0;
  bool lse_ok = true;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(expected_lse[i])) {
      lse_ok = lse_ok && std::isinf(lse[i]) && lse[i] < 0;
    } else {
      lse_ok = lse_ok && std::isfinite(lse[i]);
      lse_error = std::max(lse_error, std::abs(lse[i] - expected_lse[i]));
    }
  }
  const double error = relative_error(actual, wanted);
  const std::string name =
      fmt::format("B={} H={} Sq={} Sk={} D={}{}{}{}{}", B, H, Sq, Sk, D,
                  c.sparse ? " block-sparse" : " dense", c.packed_qkv ? " packed-qkv" : "",
                  c.lengths_and_halves ? " key lengths, lists per 64 rows" : "",
                  c.scattered_out ? ", rows written through out_rows" : "");
  expect(all_finite, name + ": every output element written and finite");
  if (c.scattered_out) expect(untouched, name + ": rows with out_rows −1 are not written");
  expect(error < 1e-2, fmt::format("{}: relative error {:.2e} < 1e-2", name, error));
  expect(lse_ok && lse_error < 2e-2,
         fmt::format("{}: LSE max abs error {:.2e} < 2e-2", name, lse_error));
}

}  // namespace

int main() {
  std::mt19937 generator(20261123);
  const Case cases[] = {
      {1, 2, 128, 128, 64, false, false},
      {1, 2, 128, 128, 128, false, false},
      {2, 3, 200, 333, 128, false, false},
      {2, 3, 200, 333, 64, false, false},
      {1, 2, 300, 300, 128, false, true},
      {1, 1, 1000, 77, 128, false, false},
      {1, 2, 1, 64, 64, false, false},
      {1, 2, 520, 700, 128, true, false},
      {2, 2, 390, 390, 64, true, true},
      {1, 3, 1024, 1100, 128, true, false},
      {2, 2, 520, 700, 128, true, false, true},
      {1, 3, 390, 390, 64, true, true, true},
      {1, 2, 130, 200, 128, true, false, true},  // 3 halves: the last CTA's second has no list
      {2, 3, 200, 333, 128, false, false, false, true},
      {2, 2, 520, 700, 64, true, false, true, true},
  };
  for (const FlashKernel kernel : {FlashKernel::Portable, FlashKernel::Hopper})
    for (const Case& c : cases) run_case(c, kernel, generator);

  FlashAttentionArgs bad;
  bad.head_dim = 96;
  expect(error_message([&] { flash_attention_forward(bad); }).find("head size 96") !=
             std::string::npos,
         "an unsupported head size is a clear error");
  return finish("flash_attention_cuda_test");
}

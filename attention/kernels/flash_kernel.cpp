#include "attention/kernels/flash_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "attention/kernels/flash_ops.h"
#include "core/error.h"
#include "core/parallel.h"

namespace mmgen::attention::flash {

namespace {

using namespace detail;
// ----------------------------------------------------------------------------- packing

// Where each key block of a pattern lives in a (batch, head)'s packed slab. Block j of L tokens
// (Lp = L rounded up to 16) holds
//   keys:   Lp/16 panels of [D][16]: panel p, element (d, t) = k[start + 16p + t][d];
//   values: Dp/16 panels of [Lp][16]: panel q, element (r, c) = v[start + r][16q + c];
// zero where t, r ≥ L or 16q + c ≥ D.
struct PackedLayout {
  std::vector<int64_t> key_offset, value_offset;
  std::vector<char> used;  // visited by some query block (others are not packed)
  int64_t slab = 0;        // floats per (batch, head)
};

PackedLayout packed_layout(const BlockSparsePattern& pattern, int64_t head_dim,
                           int64_t padded_dim) {
  PackedLayout layout;
  const int64_t blocks = pattern.kv_blocks.size();
  layout.key_offset.resize(size_t(blocks));
  layout.value_offset.resize(size_t(blocks));
  layout.used.assign(size_t(blocks), 0);
  for (int32_t j : pattern.indices) layout.used[size_t(j)] = 1;
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t padded = round_up(pattern.kv_blocks.length[size_t(j)], kPanel);
    layout.key_offset[size_t(j)] = layout.slab;
    layout.value_offset[size_t(j)] = layout.slab + padded * head_dim;
    layout.slab += padded * (head_dim + padded_dim);
  }
  return layout;
}

// Packs key block `j` of one (batch, head); `k` and `v` point at its token 0, rows `row` apart.
void pack_block(const float* k, const float* v, int64_t row, int64_t start, int64_t length,
                int64_t head_dim, int64_t padded_dim, float* keys, float* values) {
  const int64_t padded = round_up(length, kPanel);
  for (int64_t p = 0; p < padded / kPanel; ++p) {
    float* panel = keys + p * head_dim * kPanel;
    for (int64_t t = 0; t < kPanel; ++t) {
      const int64_t token = p * kPanel + t;
      if (token < length) {
        const float* src = k + (start + token) * row;
        for (int64_t d = 0; d < head_dim; ++d) panel[d * kPanel + t] = src[d];
      } else {
        for (int64_t d = 0; d < head_dim; ++d) panel[d * kPanel + t] = 0.0f;
      }
    }
  }
  for (int64_t q = 0; q < padded_dim / kPanel; ++q) {
    float* panel = values + q * padded * kPanel;
    const int64_t columns = std::min(kPanel, head_dim - q * kPanel);
    for (int64_t r = 0; r < padded; ++r) {
      float* dst = panel + r * kPanel;
      if (r < length) {
        const float* src = v + (start + r) * row + q * kPanel;
        std::memcpy(dst, src, size_t(columns) * sizeof(float));
        std::fill(dst + columns, dst + kPanel, 0.0f);
      } else {
        std::fill(dst, dst + kPanel, 0.0f);
      }
    }
  }
}

// ----------------------------------------------------------------------------- one query tile

struct TileArgs {
  const float* q;  // first query row of the tile, rows `row` apart
  int64_t row;
  int64_t rows;
  int64_t head_dim, padded_dim;
  float scale;
  const BlockSparsePattern* pattern;
  const PackedLayout* layout;
  const float* slab;  // this (batch, head)'s packed keys and values
  const int32_t* list;
  int64_t list_length;
  float* out;  // first output row, rows `row` apart
  float* lse;  // first LSE entry (contiguous over rows); may be null
};

template <typename Ops>
void attend_tile(const TileArgs& t, TileBuffers& buffers) {
  const int64_t dim = t.head_dim;
  TileState state =
      buffers.start(t.rows, dim, t.padded_dim, t.scale, [&](int64_t i) { return t.q + i * t.row; });

  // Key blocks in pieces of at most kChunk keys; consecutive pieces of the list share one
  // softmax step while their padded widths fit in kChunk.
  KeySegment segments[kChunk / kPanel];
  int64_t count = 0, width = 0;
  for (int64_t e = 0; e < t.list_length; ++e) {
    const int32_t block = t.list[e];
    const int64_t length = t.pattern->kv_blocks.length[size_t(block)];
    const int64_t padded_length = round_up(length, kPanel);
    const float* keys = t.slab + t.layout->key_offset[size_t(block)];
    const float* values = t.slab + t.layout->value_offset[size_t(block)];
    for (int64_t c0 = 0; c0 < length; c0 += kChunk) {
      const int64_t piece = std::min(kChunk, length - c0);
      if (width + round_up(piece, kPanel) > kChunk) {
        attend_segments<Ops>(state, segments, count);
        count = width = 0;
      }
      segments[count++] = {keys + c0 * dim, values + c0 * kPanel, padded_length * kPanel, piece};
      width += round_up(piece, kPanel);
    }
  }
  if (count > 0) attend_segments<Ops>(state, segments, count);
  for (int64_t i = 0; i < t.rows; ++i)
    finish_row(state, i, t.out + i * t.row, t.lse ? t.lse + i : nullptr);
}

// One unit of parallel work: `rows` query rows from `first` of query block `q_block`.
struct Task {
  int64_t q_block;
  int64_t first;
  int64_t rows;
};

template <typename Ops>
void run(const float* q, const float* k, const float* v, int64_t batch, int64_t q_len,
         int64_t kv_len, int64_t heads, int64_t head_dim, float scale,
         const std::vector<BlockSparsePattern>& patterns, float* out, float* lse) {
  const int64_t count = int64_t(patterns.size());
  const int64_t padded_dim = round_up(head_dim, kPanel), row = heads * head_dim;
  auto pattern_of = [&](int64_t bh) {
    return size_t(count == 1 ? 0 : count == heads ? bh % heads : bh);
  };

  std::vector<PackedLayout> layouts;
  std::vector<std::vector<Task>> tasks(static_cast<size_t>(count));
  for (int64_t p = 0; p < count; ++p) {
    const BlockSparsePattern& pattern = patterns[size_t(p)];
    layouts.push_back(packed_layout(pattern, head_dim, padded_dim));
    for (int64_t qb = 0; qb < pattern.q_blocks.size(); ++qb) {
      if (pattern.indptr[size_t(qb)] == pattern.indptr[size_t(qb) + 1]) continue;
      const int64_t start = pattern.q_blocks.start[size_t(qb)],
                    length = pattern.q_blocks.length[size_t(qb)];
      for (int64_t i = 0; i < length; i += kTileRows)
        tasks[size_t(p)].push_back({qb, start + i, std::min(kTileRows, length - i)});
    }
  }

  // Heads in groups whose packed keys and values fit the budget.
  AlignedBuffer packed;
  const int64_t pairs = batch * heads;
  for (int64_t g0 = 0; g0 < pairs;) {
    std::vector<int64_t> slab_start = {0};
    int64_t g1 = g0;
    while (g1 < pairs &&
           (g1 == g0 || slab_start.back() + layouts[pattern_of(g1)].slab <= kPackBudget)) {
      slab_start.push_back(slab_start.back() + layouts[pattern_of(g1)].slab);
      ++g1;
    }
    float* slabs = packed.get(slab_start.back());

    std::vector<std::pair<int64_t, int64_t>> pack_jobs;  // (bh, key block)
    std::vector<std::pair<int64_t, size_t>> work;        // (bh, task)
    double flops = 0;
    for (int64_t bh = g0; bh < g1; ++bh) {
      const size_t p = pattern_of(bh);
      for (int64_t j = 0; j < int64_t(layouts[p].used.size()); ++j)
        if (layouts[p].used[size_t(j)]) pack_jobs.emplace_back(bh, j);
      for (size_t t = 0; t < tasks[p].size(); ++t) work.emplace_back(bh, t);
      flops += double(patterns[p].visited()) * double(kv_len) /
               double(std::max<int64_t>(1, patterns[p].kv_blocks.size())) * double(q_len) *
               double(head_dim);
    }
    // One thread per ~1M multiply-adds: small heads (wan-shapes) stay on few threads.
    const int threads = threads_for(int64_t(flops), int64_t(1) << 20);

#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
    for (size_t n = 0; n < pack_jobs.size(); ++n) {
      const auto [bh, j] = pack_jobs[n];
      const int64_t b = bh / heads, h = bh % heads;
      const size_t p = pattern_of(bh);
      const BlockLayout& blocks = patterns[p].kv_blocks;
      float* slab = slabs + slab_start[size_t(bh - g0)];
      const int64_t offset = b * kv_len * row + h * head_dim;
      pack_block(k + offset, v + offset, row, blocks.start[size_t(j)], blocks.length[size_t(j)],
                 head_dim, padded_dim, slab + layouts[p].key_offset[size_t(j)],
                 slab + layouts[p].value_offset[size_t(j)]);
    }

#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      TileBuffers buffers;
#pragma omp for schedule(dynamic)
      for (size_t n = 0; n < work.size(); ++n) {
        const auto [bh, t] = work[n];
        const int64_t b = bh / heads, h = bh % heads;
        const size_t p = pattern_of(bh);
        const BlockSparsePattern& pattern = patterns[p];
        const Task& task = tasks[p][t];
        TileArgs args;
        args.q = q + (b * q_len + task.first) * row + h * head_dim;
        args.row = row;
        args.rows = task.rows;
        args.head_dim = head_dim;
        args.padded_dim = padded_dim;
        args.scale = scale;
        args.pattern = &pattern;
        args.layout = &layouts[p];
        args.slab = slabs + slab_start[size_t(bh - g0)];
        args.list = pattern.indices.data() + pattern.indptr[size_t(task.q_block)];
        args.list_length =
            pattern.indptr[size_t(task.q_block) + 1] - pattern.indptr[size_t(task.q_block)];
        args.out = out + (b * q_len + task.first) * row + h * head_dim;
        args.lse = lse ? lse + bh * q_len + task.first : nullptr;
        attend_tile<Ops>(args, buffers);
      }
    }
    g0 = g1;
  }
}

}  // namespace

bool simd_available() {
#ifdef MMGEN_FLASH_AVX2
  return true;
#else
  return false;
#endif
}

const char* best_kernel_name() {
#if defined(MMGEN_FLASH_AVX512)
  return "AVX-512";
#elif defined(MMGEN_FLASH_AVX2)
  return "AVX2/FMA";
#else
  return "portable C++";
#endif
}

void run_block_sparse(const float* q, const float* k, const float* v, int64_t batch, int64_t q_len,
                      int64_t kv_len, int64_t heads, int64_t head_dim, float scale,
                      const std::vector<BlockSparsePattern>& patterns, float* out, float* lse,
                      KernelPath path) {
  if (batch * heads * q_len * kv_len * head_dim == 0 || patterns.empty()) return;
  with_kernel_path(path, [&](auto ops) {
    run<decltype(ops)>(q, k, v, batch, q_len, kv_len, heads, head_dim, scale, patterns, out, lse);
  });
}

BlockSparsePattern dense_pattern(int64_t q_len, int64_t kv_len) {
  return BlockSparsePattern::dense(BlockLayout::uniform(q_len, kTileRows),
                                   BlockLayout::uniform(kv_len, kChunk));
}

Tensor flash_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, float scale,
                       Tensor* lse, KernelPath path) {
  const Tensor q = q_in.to(DType::F32), k = k_in.to(DType::F32), v = v_in.to(DType::F32);
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape(),
        "attention: expects q [B, Sq, H, D] and k, v [B, Sk, H, D], got q {} k {} v {}",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3);
  const int64_t kv_len = k.size(1);
  check(k.size(0) == batch && k.size(2) == heads && k.size(3) == head_dim,
        "attention: q {} and k {} do not fit together", shape_string(q.shape()),
        shape_string(k.shape()));
  Tensor out = Tensor::zeros({batch, q_len, heads, head_dim});
  if (lse) *lse = Tensor::full({batch, heads, q_len}, kNegativeInfinity);
  const std::vector<BlockSparsePattern> patterns = {dense_pattern(q_len, kv_len)};
  run_block_sparse(q.data<float>(), k.data<float>(), v.data<float>(), batch, q_len, kv_len, heads,
                   head_dim, scale, patterns, out.data<float>(), lse ? lse->data<float>() : nullptr,
                   path);
  return out;
}

}  // namespace mmgen::attention::flash

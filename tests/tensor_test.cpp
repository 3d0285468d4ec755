#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen {
namespace {

Tensor arange(const Shape& shape) {
  std::vector<float> values(size_t(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i);
  return Tensor::from_vector(shape, values);
}

TEST(Tensor, ContiguousStridesAndSize) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_THROW(t.size(3), Error);
}

// Host storage starts on a 64-byte boundary whatever malloc returned, for empty and odd sizes,
// and a freed block's memory is usable again (the allocator is asked for the same sizes).
TEST(Tensor, HostStorageIsAlignedTo64Bytes) {
  for (int round = 0; round < 2; ++round)
    for (const int64_t count : {0, 1, 3, 17, 1000, 262144, 262147}) {
      Tensor t = Tensor::empty({count});
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << count;
      if (count > 0) {
        t.data<float>()[0] = 1.0f;
        t.data<float>()[count - 1] = 2.0f;
        EXPECT_EQ(t.data<float>()[0] + t.data<float>()[count - 1], count == 1 ? 4.0f : 3.0f);
      }
    }
}

TEST(Tensor, SliceSharesStorageAndOffsets) {
  Tensor t = arange({4, 5});
  Tensor s = t.slice(0, 1, 3).slice(1, 2, 4);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.item_f32({0, 0}), 7.0f);
  EXPECT_EQ(s.item_f32({1, 1}), 13.0f);
  t.data<float>()[7] = -1;
  EXPECT_EQ(s.item_f32({0, 0}), -1.0f);  // a view, not a copy
  Tensor c = s.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(std::vector<float>(c.data<float>(), c.data<float>() + 4),
            (std::vector<float>{-1, 8, 12, 13}));
  EXPECT_THROW(t.slice(0, 3, 5), Error);
}

TEST(Tensor, PermuteAndContiguousCopy) {
  Tensor t = arange({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  Tensor c = p.contiguous();
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(c.item_f32({a, b, d}), float(b * 12 + d * 4 + a));
  EXPECT_THROW(t.permute({0, 0, 1}), Error);
}

TEST(Tensor, ViewInfersAndRejects) {
  Tensor t = arange({2, 6});
  EXPECT_EQ(t.view({3, -1}).shape(), (Shape{3, 4}));
  EXPECT_THROW(t.view({5, -1}), Error);
  EXPECT_THROW(t.permute({1, 0}).view({12}), Error);
  EXPECT_EQ(t.permute({1, 0}).reshape({12}).item_f32({1}), 6.0f);
}

TEST(Tensor, SelectAndUnsqueeze) {
  Tensor t = arange({2, 3});
  Tensor row = t.select(0, 1);
  EXPECT_EQ(row.shape(), (Shape{3}));
  EXPECT_EQ(row.item_f32({2}), 5.0f);
  Tensor u = t.unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(u.item_f32({1, 0, 0}), 3.0f);
}

TEST(Tensor, HalfPrecisionConversionsRoundToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // 1 + 3*2^-8 rounds up to even
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);  // overflow to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  for (uint32_t h = 0; h < 0x7c00; h += 7) EXPECT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h);
}

TEST(Tensor, DTypeConversionRoundTrip) {
  Tensor t = Tensor::from_vector({3}, std::vector<float>{1.5f, -2.25f, 3.0f});
  Tensor b = t.to(DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  Tensor back = b.to(DType::F32);
  EXPECT_EQ(back.item_f32({1}), -2.25f);
  Tensor i = t.to(DType::I64);
  EXPECT_EQ(i.data<int64_t>()[1], -2);
  EXPECT_THROW(t.data<int64_t>(), Error);
}

TEST(Tensor, E4m3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(f32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_e4m3(-0.5f), 0xb0);
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e9f), 0x7e);     // saturated, as __NV_SATFINITE
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: the even one
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);  // halfway between 1.125 and 1.25: the even one
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -9)), 0x01);  // the smallest subnormal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -11)), 0x00);
  for (int bits = 0; bits < 0x7f; ++bits) {  // every finite positive value round-trips
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(bits))), bits);
    EXPECT_EQ(f32_to_e4m3(-e4m3_to_f32(uint8_t(bits))), bits == 0 ? 0x80 : (bits | 0x80));
  }
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
}

// f8_e4m3_rows on the host: a row's scale is max|row| / 448, its values e4m3(x / scale), the
// scales after the values from the next 16-byte boundary; views keep the rows, slices are refused.
TEST(Tensor, E4m3RowsQuantizePerRowAndKeepTheirScales) {
  const Tensor x = Tensor::from_vector(
      {2, 3}, std::vector<float>{448.0f * 2, -1.0f, 0.3f, 0.0f, 0.0f, 0.0f});  // a row of zeros
  const Tensor q = x.to(DType::F8E4M3Rows);
  EXPECT_EQ(q.dtype(), DType::F8E4M3Rows);
  EXPECT_EQ(q.nbytes(), 16u + 2 * sizeof(float));
  EXPECT_EQ(reinterpret_cast<const std::byte*>(q.row_scales()) - q.raw(), 16);
  EXPECT_EQ(q.row_scales()[0], 2.0f);
  EXPECT_EQ(q.row_scales()[1], 1.0f);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(q.raw());
  EXPECT_EQ(bytes[0], 0x7e);                      // 896 / 2 = 448
  EXPECT_EQ(bytes[1], f32_to_e4m3(-0.5f));        // exact
  EXPECT_EQ(bytes[2], f32_to_e4m3(0.3f / 2.0f));  // 0.15 rounds to 0.15625
  const Tensor back = q.to(DType::F32);
  EXPECT_EQ(back.item_f32({0, 0}), 896.0f);
  EXPECT_EQ(back.item_f32({0, 1}), -1.0f);
  EXPECT_EQ(back.item_f32({0, 2}), 0.3125f);
  EXPECT_EQ(back.item_f32({1, 2}), 0.0f);
  EXPECT_EQ(q.view({1, 2, 3}).nbytes(), q.nbytes());
  EXPECT_THROW((void)q.view({3, 2}), Error);      // rows of 2 would misplace the scales
  EXPECT_THROW((void)q.slice(0, 1, 2), Error);    // a row without its scale's place
  EXPECT_THROW((void)q.item_f32({0, 0}), Error);  // not a value without its scale
  // Dequantized within e4m3's rounding of each value relative to its row's scale.
  const Tensor wide = ops::random_uniform({5, 64}, DType::F32, Device::CPU, 3, 2.0f);
  const Tensor wide_back = wide.to(DType::F8E4M3Rows).to(DType::F32);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 64; ++c) {
      const float v = wide.item_f32({r, c}), d = wide_back.item_f32({r, c});
      EXPECT_LE(std::fabs(d - v), std::fabs(v) / 16 + std::ldexp(2.0f / 448, -10)) << r << "," << c;
    }
}

TEST(Tensor, DeviceIsTheStoragesAndCpuMovesShare) {
  const Tensor t = arange({2, 3});
  EXPECT_EQ(t.device(), Device::CPU);
  EXPECT_EQ(Tensor().device(), Device::CPU);
  const Tensor moved = t.to(Device::CPU);
  EXPECT_EQ(moved.raw(), t.raw());  // already there: no copy
  EXPECT_STREQ(device_name(Device::CUDA), "cuda");
#ifndef MMGEN_HAVE_CUDA
  try {
    (void)Tensor::empty({2}, DType::F32, Device::CUDA);
    FAIL() << "a CUDA tensor in a CPU-only build must be refused";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no CUDA support"), std::string::npos) << error.what();
  }
#endif
}

TEST(Ops, ActivationsFollowTheirFormulas) {
  const std::vector<float> values = {-3.0f, -0.5f, 0.0f, 0.25f, 2.0f};
  const struct {
    Activation activation;
    double (*formula)(double);
  } cases[] = {
      {Activation::Relu, [](double v) { return v > 0 ? v : 0.0; }},
      {Activation::Gelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {Activation::GeluTanh,
       [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       }},
      {Activation::Silu, [](double v) { return v / (1 + std::exp(-v)); }},
  };
  for (const auto& c : cases) {
    Tensor x = Tensor::from_vector({5}, values);
    ops::activate_(x, c.activation);
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(x.data<float>()[i], c.formula(values[i]), 1e-6) << int(c.activation);
  }
}

// The SwiGLU gate in one pass gives the float32 values of silu_ then mul_ bit for bit (models
// switched to it keep their CPU outputs), over a size past the parallel threshold, and converts
// to bf16 exactly as .to() does; different shapes are refused.
TEST(Ops, SiluMulIsSiluThenMulBitForBit) {
  const int64_t n = 40001;
  const Tensor gate = ops::random_uniform({n}, DType::F32, Device::CPU, 3, 6.0f);
  const Tensor up = ops::random_uniform({n}, DType::F32, Device::CPU, 4, 2.0f);
  Tensor expected = gate.clone();
  ops::silu_(expected);
  ops::mul_(expected, up);
  const Tensor actual = ops::silu_mul(gate, up);
  ASSERT_EQ(actual.shape(), expected.shape());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(actual.data<float>()[i], expected.data<float>()[i]) << i;
  const Tensor rounded = ops::silu_mul(gate, up.to(DType::BF16), DType::BF16);
  const Tensor expected_bf16 =
      ops::silu_mul(gate, up.to(DType::BF16).to(DType::F32)).to(DType::BF16);
  ASSERT_EQ(rounded.dtype(), DType::BF16);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(rounded.data<uint16_t>()[i], expected_bf16.data<uint16_t>()[i]) << i;
  EXPECT_THROW(ops::silu_mul(gate, up.view({n, 1}).slice(0, 0, n - 1)), Error);
}

// adaLN's (scale, gate) pairs: each scale row becomes norm·(1 + scale), each gate row tanh(gate),
// pair p of group g reading norms row (g, p); a layout that is not pairs over the norms is refused.
TEST(Ops, FoldScaleGateFoldsEachPairIntoItsNorm) {
  const int64_t groups = 2, pairs = 2, dim = 3;
  std::vector<float> m(size_t(groups * 2 * pairs * dim)), n(size_t(groups * pairs * dim));
  for (size_t i = 0; i < m.size(); ++i) m[i] = std::sin(0.7f * float(i)) * 1.5f;
  for (size_t i = 0; i < n.size(); ++i) n[i] = 0.25f + 0.1f * float(i);
  const Tensor folded = ops::fold_scale_gate(Tensor::from_vector({groups, 2 * pairs, dim}, m),
                                             Tensor::from_vector({groups, pairs, dim}, n));
  ASSERT_EQ(folded.shape(), (Shape{groups, 2 * pairs, dim}));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t c = 0; c < dim; ++c) {
        const size_t scale = size_t(((g * 2 * pairs) + 2 * p) * dim + c), gate = scale + dim;
        const float norm = n[size_t((g * pairs + p) * dim + c)];
        EXPECT_EQ(folded.data<float>()[scale], norm * (1.0f + m[scale])) << g << p << c;
        EXPECT_EQ(folded.data<float>()[gate], std::tanh(m[gate])) << g << p << c;
      }
  EXPECT_THROW(ops::fold_scale_gate(Tensor::zeros({groups, 2 * pairs, dim}),
                                    Tensor::zeros({groups, pairs, dim + 1})),
               Error);
  EXPECT_THROW(ops::fold_scale_gate(Tensor::zeros({groups, 2 * pairs + 1, dim}),
                                    Tensor::zeros({groups, pairs, dim})),
               Error);
  EXPECT_THROW(ops::fold_scale_gate(Tensor::zeros({groups, 2 * pairs, dim}, DType::BF16),
                                    Tensor::zeros({groups, pairs, dim})),
               Error);
}

// Z-Image normalises q one row per head with tables of one row per token: rows_per_position
// must read token r / heads's row, the same values as tables repeated per head, and turn the
// pairs by the formula.
TEST(Ops, RmsNormRopeRowsPerPositionReadsOneTableRowPerToken) {
  const int64_t tokens = 3, heads = 2, head_dim = 4, half = 2;
  const Tensor x = arange({tokens * heads, head_dim});
  std::vector<float> c(size_t(tokens * half)), s(c.size()), c_rep, s_rep;
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = std::cos(0.3f * float(i + 1)), s[i] = std::sin(0.3f * float(i + 1));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < half; ++j) {
        c_rep.push_back(c[size_t(t * half + j)]);
        s_rep.push_back(s[size_t(t * half + j)]);
      }
  const Tensor weight = Tensor::from_vector({head_dim}, std::vector<float>{1.0f, 0.5f, 2.0f, 1.5f});
  Tensor per_token = x.clone(), repeated = x.clone();
  ops::rms_norm_rope_(per_token, weight, 1e-5f, Tensor::from_vector({tokens, half}, c),
                      Tensor::from_vector({tokens, half}, s), head_dim, heads);
  ops::rms_norm_rope_(repeated, weight, 1e-5f, Tensor::from_vector({tokens * heads, half}, c_rep),
                      Tensor::from_vector({tokens * heads, half}, s_rep), head_dim);
  const float* a = per_token.data<float>();
  const float* b = repeated.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(a[i], b[i]) << i;
  // Row 3 is token 1's second head: values 12..15, normalised, pair 0 turned by table row 1.
  const float* row = x.data<float>() + 3 * head_dim;
  double squares = 0;
  for (int64_t i = 0; i < head_dim; ++i) squares += double(row[i]) * row[i];
  const float inv = float(1.0 / std::sqrt(squares / double(head_dim) + 1e-5));
  const float x1 = row[0] * inv * 1.0f, x2 = row[1] * inv * 0.5f;
  EXPECT_FLOAT_EQ(a[3 * head_dim], x1 * c[2] - x2 * s[2]);
  EXPECT_FLOAT_EQ(a[3 * head_dim + 1], x1 * s[2] + x2 * c[2]);
}

// Each row repeated in place: row r·times + j is row r, for float32 and bf16 alike.
TEST(Ops, RepeatRowsRepeatsEachRowInABlock) {
  const Tensor x =
      Tensor::from_vector(Shape{3, 2, 2}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const Tensor out = ops::repeat_rows(x, 3);
  ASSERT_EQ(out.shape(), (Shape{9, 2, 2}));
  for (int64_t r = 0; r < 9; ++r)
    for (int64_t i = 0; i < 4; ++i)
      EXPECT_EQ(out.data<float>()[r * 4 + i], float((r / 3) * 4 + i)) << r << " " << i;
  const Tensor half = ops::repeat_rows(x.to(DType::BF16), 2).to(DType::F32);
  EXPECT_EQ(half.select(0, 5).item_f32({1, 1}), 11.0f);
  EXPECT_THROW(ops::repeat_rows(x, 0), Error);
}

TEST(Ops, RandomUniformIsSeededBoundedAndRoundedThroughBf16) {
  const Tensor a = ops::random_uniform({4096}, DType::F32, Device::CPU, 7, 0.5f);
  const Tensor b = ops::random_uniform({4096}, DType::F32, Device::CPU, 7, 0.5f);
  const Tensor c = ops::random_uniform({4096}, DType::F32, Device::CPU, 8, 0.5f);
  const Tensor h = ops::random_uniform({4096}, DType::BF16, Device::CPU, 7, 0.5f);
  double mean = 0;
  int differing = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float v = a.data<float>()[i];
    EXPECT_TRUE(v >= -0.5f && v <= 0.5f) << v;
    EXPECT_EQ(v, b.data<float>()[i]);
    EXPECT_EQ(v, bf16_to_f32(h.data<uint16_t>()[i]));  // the bf16 values are the float32 ones
    differing += v != c.data<float>()[i];
    mean += v;
  }
  EXPECT_GT(differing, 4000);  // another seed, other numbers
  EXPECT_NEAR(mean / double(a.numel()), 0.0, 0.02);
}

// Blocks of 32 MiB and more: glibc would hand them back to the kernel and the next tensor of the
// size would be fresh zeroed pages; they are kept for reuse instead.
TEST(TensorStorage, AFreedLargeBlockServesTheNextTensorOfItsSize) {
  const Shape large = {48, 1024, 1024};  // 192 MiB of float32
  const int64_t middle = 24 * 1024 * 1024;
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty(large);
    t.data<float>()[middle] = 12345.0f;  // fresh pages from the kernel would read 0
    first = t.raw();
  }
  const Tensor again = Tensor::empty(large);
  EXPECT_EQ(first, static_cast<const void*>(again.raw()));
  EXPECT_EQ(again.data<float>()[middle], 12345.0f);
}

}  // namespace
}  // namespace mmgen

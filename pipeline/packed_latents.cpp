#include "pipeline/packed_latents.h"

#include "core/error.h"
#include "core/random.h"

namespace mmgen {

Tensor pack_latents_2x2(const Tensor& latents) {
  check(latents.dim() == 4 && latents.size(0) == 1 && latents.size(2) % 2 == 0 &&
            latents.size(3) % 2 == 0,
        "latents must be [1, C, h, w] with even h and w, got {}", shape_string(latents.shape()));
  const Tensor in = latents.to(DType::F32).contiguous();
  const int64_t c = in.size(1), h = in.size(2), w = in.size(3), rows = h / 2, columns = w / 2;
  Tensor out = Tensor::empty({1, rows * columns, 4 * c});
  const float* from = in.data<float>();
  float* to = out.data<float>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < columns; ++j)
      for (int64_t k = 0; k < c; ++k)
        for (int64_t dy = 0; dy < 2; ++dy)
          for (int64_t dx = 0; dx < 2; ++dx)
            to[(i * columns + j) * 4 * c + k * 4 + dy * 2 + dx] =
                from[(k * h + 2 * i + dy) * w + 2 * j + dx];
  return out;
}

Tensor unpack_latents_2x2(const Tensor& packed, int64_t c, int64_t h, int64_t w) {
  check(packed.dim() == 3 && packed.size(1) == (h / 2) * (w / 2) && packed.size(2) == 4 * c,
        "packed latents {} do not fill [1, {}, {}, {}]", shape_string(packed.shape()), c, h, w);
  const Tensor in = packed.to(DType::F32).contiguous();
  const int64_t columns = w / 2;
  Tensor out = Tensor::empty({1, c, h, w});
  const float* from = in.data<float>();
  float* to = out.data<float>();
  for (int64_t i = 0; i < h / 2; ++i)
    for (int64_t j = 0; j < columns; ++j)
      for (int64_t k = 0; k < c; ++k)
        for (int64_t dy = 0; dy < 2; ++dy)
          for (int64_t dx = 0; dx < 2; ++dx)
            to[(k * h + 2 * i + dy) * w + 2 * j + dx] =
                from[(i * columns + j) * 4 * c + k * 4 + dy * 2 + dx];
  return out;
}

Tensor initial_packed_latents(const Tensor& given, const Shape& shape, uint64_t seed) {
  if (!given.defined()) return pack_latents_2x2(randn(shape, seed));
  const Shape with_frame = {shape[0], 1, shape[1], shape[2], shape[3]};
  check(given.shape() == shape || given.shape() == with_frame,
        "--latents has shape {} but this request needs {} (or {})", shape_string(given.shape()),
        shape_string(shape), shape_string(with_frame));
  return pack_latents_2x2(given.to(DType::F32).contiguous().view(shape));
}

}  // namespace mmgen

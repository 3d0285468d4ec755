#include "core/pitched_copy.h"

#include <cstring>

#include "core/error.h"

#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/device_storage.h"
#endif

namespace mmgen {
namespace {

struct Rows {
  std::byte* data = nullptr;
  int64_t rows = 0, row_bytes = 0, pitch_bytes = 0;
};

// `t` as rows: the trailing dimensions that are contiguous make the row; the leading ones must
// step by one pitch together (each dimension's stride the next one's stride times its size).
Rows as_rows(const Tensor& t, const char* which) {
  const Shape& shape = t.shape();
  const Shape& strides = t.strides();
  const int64_t element = int64_t(dtype_size(t.dtype()));
  int64_t d = t.dim(), row = 1;
  while (d > 0 && (shape[size_t(d - 1)] == 1 || strides[size_t(d - 1)] == row))
    row *= shape[size_t(--d)];
  Rows r;
  r.data = const_cast<std::byte*>(t.raw());
  r.row_bytes = row * element;
  r.rows = 1;
  if (d == 0) {
    r.pitch_bytes = r.row_bytes;
    return r;
  }
  // Leading dimensions: from the innermost outward, each must continue the pitch.
  const int64_t pitch = strides[size_t(d - 1)];
  int64_t expected = pitch;
  for (int64_t i = d; i-- > 0;) {
    if (shape[size_t(i)] != 1)
      check(strides[size_t(i)] == expected,
            "copy_pitched: the {} tensor ({} with strides {}) is not rows at one pitch", which,
            shape_string(shape), shape_string(strides));
    expected *= shape[size_t(i)];
    r.rows *= shape[size_t(i)];
  }
  r.pitch_bytes = pitch * element;
  return r;
}

}  // namespace

void copy_pitched(const Tensor& to, const Tensor& from) {
  check(to.shape() == from.shape() && to.dtype() == from.dtype() && to.device() == from.device(),
        "copy_pitched: {} {} on {} into {} {} on {}", shape_string(from.shape()),
        dtype_name(from.dtype()), device_name(from.device()), shape_string(to.shape()),
        dtype_name(to.dtype()), device_name(to.device()));
  if (to.numel() == 0) return;
  Rows dst = as_rows(to, "destination"), src = as_rows(from, "source");
  // The two may split rows differently (one contiguous, the other pitched): use the shorter row.
  if (dst.row_bytes != src.row_bytes) {
    Rows& longer = dst.row_bytes > src.row_bytes ? dst : src;
    const Rows& shorter = dst.row_bytes > src.row_bytes ? src : dst;
    check(longer.rows == 1 || longer.row_bytes == longer.pitch_bytes,
          "copy_pitched: the two layouts do not line up");
    longer.rows = shorter.rows;
    longer.row_bytes = shorter.row_bytes;
    longer.pitch_bytes = shorter.row_bytes;
  }
#ifdef MMGEN_HAVE_CUDA
  if (!to.is_cpu()) {
    cuda::copy_2d_device_to_device(dst.data, size_t(dst.pitch_bytes), src.data,
                                   size_t(src.pitch_bytes), size_t(dst.row_bytes),
                                   size_t(dst.rows));
    return;
  }
#endif
  check(to.is_cpu(), "copy_pitched: a GPU tensor in a build without CUDA");
  for (int64_t r = 0; r < dst.rows; ++r)
    std::memcpy(dst.data + r * dst.pitch_bytes, src.data + r * src.pitch_bytes,
                size_t(dst.row_bytes));
}

}  // namespace mmgen

// safetensors files: a validating, memory-mapped reader, sharded checkpoints
// (`*.safetensors.index.json`), and a writer.
//
// Everything in a header is checked before any tensor is handed out: header length within the
// file and below a bound, well-formed JSON, known dtypes, shapes whose byte size equals the
// offsets' span, offsets inside the data section, and no two tensors overlapping.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/file.h"
#include "core/tensor.h"

namespace mmgen {

namespace gguf {
class GgufFile;
}

struct TensorInfo {
  DType dtype;
  Shape shape;
  size_t begin = 0;  // byte offsets into the data section
  size_t end = 0;
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const fs::path& path);

  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const TensorInfo& info(const std::string& name) const;
  // A view into the mapping (a copy where the file misaligns the data), in the stored dtype.
  Tensor tensor(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const fs::path& path() const { return file_->path(); }

 private:
  std::shared_ptr<MappedFile> file_;
  size_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The weights of one component folder: a single `*.safetensors` file, the shards an index file
// names, or one GGUF file (core/gguf.h; its tensors read as float32, dequantized when asked for,
// in the shape a `comfy.gguf.orig_shape.<name>` entry gives where the converter flattened them).
// Tensors are mapped, not read, so memory stays close to what is used. e4m3 weights with their
// scales (ComfyUI's FP8 checkpoints, core/scaled_fp8.h) read as e4m3 · scale: the scales and
// markers are not weights of the model, so names() leaves them out.
class WeightStore {
 public:
  static WeightStore open_folder(const fs::path& folder);
  static WeightStore open_file(const fs::path& file);  // *.safetensors or *.gguf

  // The same weights under the names `rename` gives each stored name (a checkpoint saved in
  // another tool's naming, such as the original Wan release's); two names meeting is an error.
  WeightStore renamed(const std::function<std::string(const std::string&)>& rename) const;

  // Rows [begin, begin + count) of a stored tensor's first dimension.
  struct RowRange {
    int64_t begin = 0;
    int64_t count = 0;
  };
  // A tensor made of row ranges of one tensor of the store, in order: a fused q/k/v matrix split
  // into three, or a modulation's halves swapped, as an original release's layout needs.
  struct RowPieces {
    std::string source;
    std::vector<RowRange> rows;
  };
  // The same weights with each key of `pieces` made of its source's rows and the sources taken
  // out. One range stays a view of the mapping (a GGUF matrix stays its blocks for the product);
  // several are copied when read.
  WeightStore with_row_pieces(const std::map<std::string, RowPieces>& pieces) const;

  // The same weights with each of `tensors` (host tensors of a float dtype, each the shape of the
  // weight it replaces) read instead of the stored one: a LoRA merged into its base
  // (models/lora/). Every name must be in the store already.
  WeightStore with_replaced(const std::map<std::string, Tensor>& tensors) const;
  // This store with each named matrix carrying a low-rank update (a LoRA in the runtime mode,
  // core/low_rank.h): get() and get_for_product() return the tensor with it, the stored values
  // as they are. An update must fit the matrix ([out, rank] · [rank, in]).
  WeightStore with_low_rank(
      const std::map<std::string, std::shared_ptr<const LowRankUpdate>>& updates) const;

  bool has(const std::string& name) const { return where_.count(name) > 0; }
  // The name `name` has in the file (itself unless renamed() mapped it): what inspect shows of a
  // key mapping.
  const std::string& stored_name(const std::string& name) const;
  Tensor get(const std::string& name) const;  // stored dtype (e4m3 weights: float32, scaled)
  // What a linear layer's product reads: as get(), except that a GGUF q8_0 matrix stays q8_0
  // blocks (dtype q8_0, [rows, cols / 32], mapped), which the CPU product dequantizes as it packs,
  // and an e4m3 matrix stays e4m3 with its scales (f8_e4m3_rows, a copy of the stored bytes).
  Tensor get_for_product(const std::string& name) const;
  // The dtype get_for_product gives `name` (q8_0 ... q6_k blocks, f8_e4m3_rows, or as get()),
  // from the headers alone.
  DType product_dtype(const std::string& name) const;
  Tensor get_f32(const std::string& name) const;  // converted to float32 (copied if needed)
  // Like get_f32, and checks the shape, naming the tensor and the file when it differs.
  Tensor get_f32(const std::string& name, const Shape& expected) const;
  const TensorInfo& info(const std::string& name) const;
  // The type the tensor is stored as: "bf16", "f32", ... or a GGUF file's "q8_0", "q4_k", ...
  std::string stored_type(const std::string& name) const;
  std::vector<std::string> names() const;
  size_t stored_bytes() const;
  const fs::path& origin() const { return origin_; }
  // The safetensors files the tensors come from (one, or the shards an index names).
  std::vector<fs::path> files() const;

 private:
  struct Entry {
    size_t file = 0;     // index into files_, or kGguf
    std::string stored;  // the name in the file
    // An e4m3 weight's scale (scale_file: kNoScale when it has none, scale 1).
    size_t scale_file = kNoScale;
    std::string scale;
    // with_row_pieces' rows of the stored tensor (empty: all of it), and the header they make.
    std::vector<RowRange> rows;
    std::shared_ptr<const TensorInfo> pieces_info;
    // with_replaced's tensor, read instead of the stored one, and its header.
    std::shared_ptr<const Tensor> replaced;
    std::shared_ptr<const LowRankUpdate> low_rank;  // with_low_rank's
  };
  static constexpr size_t kNoScale = size_t(-2);
  static constexpr size_t kGguf = size_t(-1);
  static WeightStore open_gguf(const fs::path& file);
  const TensorInfo& stored_info(const Entry& entry) const;  // with_row_pieces' shape, if any
  const TensorInfo& whole_info(const Entry& entry) const;   // the stored tensor's
  Tensor whole_tensor(const Entry& entry) const;            // as get() reads the stored tensor
  // Pairs each e4m3 weight with its scale and takes the scales and markers out of the names.
  void attach_fp8_scales();
  Tensor fp8_scale(const Entry& entry) const;  // undefined where the weight has none

  fs::path origin_;
  std::vector<SafetensorsFile> files_;
  std::shared_ptr<const gguf::GgufFile> gguf_;
  std::map<std::string, TensorInfo> gguf_info_;  // stored name -> float32, the model's shape
  std::map<std::string, Entry> where_;           // the model's name -> where it is stored
  size_t companion_bytes_ = 0;                   // the fp8 scales and markers left out of names
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes tensors (any dtype, any strides) to `path` atomically.
void write_safetensors(const fs::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// One tensor of a file written a tensor at a time: its name, dtype and shape (the header is
// written first), and what gives its values when its turn comes.
struct TensorToStore {
  std::string name;
  DType dtype;
  Shape shape;
  std::function<Tensor()> load;  // a tensor of that dtype and shape
};

// Writes the tensors to `path` atomically, holding one in memory at a time, so a checkpoint
// larger than memory converts.
void write_safetensors(const fs::path& path, const std::vector<TensorToStore>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mmgen

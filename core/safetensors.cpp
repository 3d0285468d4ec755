#include "core/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/gguf.h"
#include "core/json.h"
#include "core/low_rank.h"
#include "core/scaled_fp8.h"
#include "core/text.h"

namespace mmgen {
namespace {

using json = nlohmann::json;

uint64_t read_le64(const std::byte* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | uint64_t(p[i]);
  return value;
}

// Reads one header entry, checking its fields; `where` prefixes messages.
TensorInfo parse_entry(const std::string& where, const std::string& raw_name, const json& entry,
                       size_t data_size) {
  const std::string name = text_for_message(raw_name);  // for messages: escaped, capped
  check(entry.is_object(), "{}: entry '{}' is not a JSON object", where, name);
  for (const char* key : {"dtype", "shape", "data_offsets"})
    check(entry.contains(key), "{}: tensor '{}' has no '{}'", where, name, key);
  const json& dtype = entry["dtype"];
  check(dtype.is_string(), "{}: tensor '{}' has a non-string dtype", where, name);
  auto parsed = dtype_from_safetensors(dtype.get<std::string>());
  check(
      parsed.has_value(),
      "{}: tensor '{}' has unknown dtype '{}' (known: F32, F64, BF16, F16, F8_E4M3, I64, I32, I8, "
      "U8, BOOL)",
      where, name, text_for_message(dtype.get<std::string>()));
  TensorInfo info;
  info.dtype = *parsed;

  const json& shape = entry["shape"];
  check(shape.is_array() && shape.size() <= 16, "{}: tensor '{}' has a malformed shape", where,
        name);
  // `span` multiplies the non-zero extents: a zero extent empties the tensor, but the strides are
  // still products of the others and must fit in int64 ([0, 2^62, 2^62] overflowed them).
  uint64_t bytes = dtype_size(info.dtype), span = bytes;
  for (const json& extent : shape) {
    check(extent.is_number_unsigned() || (extent.is_number_integer() && extent.get<int64_t>() >= 0),
          "{}: tensor '{}' has a shape entry that is not a non-negative integer", where, name);
    uint64_t value = extent.get<uint64_t>();
    check(!__builtin_mul_overflow(span, std::max<uint64_t>(value, 1), &span) &&
              span <= uint64_t(INT64_MAX),
          "{}: tensor '{}' has a shape too large to address", where, name);
    bytes *= value;  // at most span
    info.shape.push_back(int64_t(value));
  }

  const json& offsets = entry["data_offsets"];
  check(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
            offsets[1].is_number_unsigned(),
        "{}: tensor '{}' needs data_offsets [begin, end] of non-negative integers", where, name);
  uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  check(begin <= end, "{}: tensor '{}' has data_offsets [{}, {}] with begin after end", where, name,
        begin, end);
  check(end <= data_size,
        "{}: tensor '{}' ends at byte {} but the data section has only {} bytes (file truncated?)",
        where, name, end, data_size);
  check(end - begin == bytes,
        "{}: tensor '{}' has shape {} x {} = {} bytes but its offsets span {} bytes", where, name,
        shape_string(info.shape), dtype_name(info.dtype), bytes, end - begin);
  info.begin = size_t(begin);
  info.end = size_t(end);
  return info;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  SafetensorsFile result;
  result.file_ = MappedFile::open(path);
  const std::string where = path.string();
  const size_t size = result.file_->size();
  check(size >= 8,
        "{}: {} bytes is too short for a safetensors file (it needs an 8-byte header length)",
        where, size);
  const uint64_t header_length = read_le64(result.file_->data());
  check(header_length <= Limits::kMaxSafetensorsHeader,
        "{}: header length {} is larger than the {} bytes allowed; the file is not safetensors or "
        "is corrupt",
        where, header_length, Limits::kMaxSafetensorsHeader);
  check(header_length <= size - 8,
        "{}: header length {} runs past the end of the {}-byte file (truncated?)", where,
        header_length, size);
  const char* header_begin = reinterpret_cast<const char*>(result.file_->data() + 8);
  const json header = parse_json(std::string_view(header_begin, size_t(header_length)),
                                 where + " header", "the file is damaged or not safetensors",
                                 /*unique_keys=*/true);
  check(header.is_object(), "{}: the header is not a JSON object", where);

  result.data_start_ = size_t(8 + header_length);
  const size_t data_size = size - result.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      check(it->is_object(), "{}: __metadata__ is not an object", where);
      for (auto m = it->begin(); m != it->end(); ++m) {
        check(m->is_string(), "{}: __metadata__ value '{}' is not a string", where,
              text_for_message(m.key()));
        result.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    result.tensors_[it.key()] = parse_entry(where, it.key(), *it, data_size);
  }

  // No two tensors may share bytes (zero-size tensors occupy none).
  std::vector<std::pair<const std::string*, const TensorInfo*>> ordered;
  for (const auto& [name, info] : result.tensors_)
    if (info.end > info.begin) ordered.push_back({&name, &info});
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < ordered.size(); ++i)
    check(ordered[i].second->begin >= ordered[i - 1].second->end,
          "{}: tensors '{}' and '{}' overlap in the data section", where,
          text_for_message(*ordered[i - 1].first), text_for_message(*ordered[i].first));
  return result;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  check(it != tensors_.end(), "{}: no tensor named '{}'", path().string(), text_for_message(name));
  return it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& entry = info(name);
  const size_t offset = data_start_ + entry.begin;
  Tensor view = Tensor::wrap(file_, offset, entry.shape, entry.dtype);
  // The format does not align tensors (writers pad the header to 8 bytes, but need not), and the
  // kernels read through typed pointers: a misaligned tensor is copied into aligned memory.
  if (offset % dtype_size(entry.dtype) != 0) return view.clone();
  return view;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto& [name, info] : tensors_) names.push_back(name);
  return names;
}

WeightStore WeightStore::open_file(const fs::path& file) {
  // A GGUF file by its magic, whatever its name (a component file may be called anything).
  if (file.extension() == ".gguf" || read_file_head(file, 4) == "GGUF") return open_gguf(file);
  WeightStore store;
  store.origin_ = file;
  store.files_.push_back(SafetensorsFile::open(file));
  for (const auto& name : store.files_[0].names()) store.where_[name] = {0, name};
  store.attach_fp8_scales();
  return store;
}

void WeightStore::attach_fp8_scales() {
  std::vector<std::string> companions;
  for (auto& [name, entry] : where_) {
    if (fp8::is_companion(name)) {
      companions.push_back(name);
      continue;
    }
    const TensorInfo& info = stored_info(entry);
    for (const std::string& scale : fp8::scale_names(name)) {
      auto found = where_.find(scale);
      if (found == where_.end()) continue;
      const TensorInfo& scale_info = stored_info(found->second);
      check(info.dtype == DType::F8E4M3,
            "{}: {} is {} with a scale {}; mmgen reads scaled FP8 weights (F8_E4M3), not this "
            "quantization; convert the checkpoint to bf16 or FP8",
            origin_.string(), name, dtype_name(info.dtype), scale);
      fp8::check_scale(name, info.shape, scale, scale_info.dtype, scale_info.shape);
      entry.scale_file = found->second.file;
      entry.scale = found->second.stored;
      break;
    }
  }
  for (const std::string& name : companions) {
    const TensorInfo& info = stored_info(where_.at(name));
    companion_bytes_ += info.end - info.begin;
    where_.erase(name);
  }
}

Tensor WeightStore::fp8_scale(const Entry& entry) const {
  if (entry.scale_file == kNoScale) return Tensor();
  return files_[entry.scale_file].tensor(entry.scale);
}

WeightStore WeightStore::open_gguf(const fs::path& file) {
  WeightStore store;
  store.origin_ = file;
  auto gguf = std::make_shared<gguf::GgufFile>(gguf::GgufFile::open(file));
  for (const gguf::GgufTensorInfo& tensor : gguf->tensors()) {
    TensorInfo info;
    info.dtype = DType::F32;
    info.shape = tensor.shape;
    info.begin = tensor.offset;
    info.end = tensor.offset + tensor.nbytes;
    // ComfyUI-GGUF's converter flattens tensors GGUF cannot hold as they are (5-D convolutions,
    // rows that are not whole K-quant blocks) and keeps the shape here.
    const std::string key = "comfy.gguf.orig_shape." + tensor.name;
    if (gguf->metadata().contains(key)) {
      const nlohmann::json& shape = gguf->metadata()[key];
      Shape original;
      if (shape.is_array())
        for (const auto& d : shape)
          original.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
      check(!original.empty() &&
                std::all_of(original.begin(), original.end(), [](int64_t d) { return d > 0; }) &&
                shape_numel(original) == shape_numel(tensor.shape),
            "{}: {} is not a shape of tensor {} ({} elements)", file.string(), key, tensor.name,
            shape_numel(tensor.shape));
      info.shape = original;
    }
    store.gguf_info_[tensor.name] = info;
    store.where_[tensor.name] = {kGguf, tensor.name};
  }
  store.gguf_ = std::move(gguf);
  return store;
}

WeightStore WeightStore::renamed(
    const std::function<std::string(const std::string&)>& rename) const {
  WeightStore store = *this;
  store.where_.clear();
  for (const auto& [name, entry] : where_) {
    const std::string to = rename(name);
    check(store.where_.emplace(to, entry).second, "{}: two weights are both named {} here",
          origin_.string(), to);
  }
  return store;
}

const TensorInfo& WeightStore::whole_info(const Entry& entry) const {
  return entry.file == kGguf ? gguf_info_.at(entry.stored) : files_[entry.file].info(entry.stored);
}

const TensorInfo& WeightStore::stored_info(const Entry& entry) const {
  return entry.pieces_info ? *entry.pieces_info : whole_info(entry);
}

WeightStore WeightStore::with_replaced(const std::map<std::string, Tensor>& tensors) const {
  WeightStore store = *this;
  for (const auto& [name, tensor] : tensors) {
    auto found = store.where_.find(name);
    check(found != store.where_.end(), "{}: no weight named '{}' to replace", origin_.string(),
          name);
    const TensorInfo& stored = stored_info(found->second);
    check(tensor.defined() && tensor.is_cpu() && dtype_is_floating(tensor.dtype()) &&
              !dtype_is_blocks(tensor.dtype()) && tensor.dtype() != DType::F8E4M3Rows &&
              tensor.shape() == stored.shape,
          "{}: '{}' must be replaced by a host float tensor of shape {}", origin_.string(), name,
          shape_string(stored.shape));
    Entry entry;
    entry.stored = found->second.stored;
    entry.replaced = std::make_shared<const Tensor>(tensor.contiguous());
    // Its header: the dtype and shape read; the byte span its values take.
    entry.pieces_info = std::make_shared<TensorInfo>(
        TensorInfo{tensor.dtype(), tensor.shape(), 0, entry.replaced->nbytes()});
    found->second = std::move(entry);
  }
  return store;
}

WeightStore WeightStore::with_low_rank(
    const std::map<std::string, std::shared_ptr<const LowRankUpdate>>& updates) const {
  WeightStore store = *this;
  for (const auto& [name, update] : updates) {
    auto found = store.where_.find(name);
    check(found != store.where_.end(), "{}: no weight named '{}' for a LoRA's update",
          origin_.string(), name);
    const TensorInfo& stored = stored_info(found->second);
    const int64_t values = stored.shape.size() == 2 ? stored.shape[1] : 0;
    check(update && stored.shape.size() == 2 && update->up.dim() == 2 && update->down.dim() == 2 &&
              update->up.size(0) == stored.shape[0] && update->down.size(1) == values &&
              update->up.size(1) == update->down.size(0),
          "{}: a LoRA's update does not fit '{}' of shape {}", origin_.string(), name,
          shape_string(stored.shape));
    found->second.low_rank = update;
  }
  return store;
}

WeightStore WeightStore::with_row_pieces(const std::map<std::string, RowPieces>& pieces) const {
  WeightStore store = *this;
  std::map<std::string, Entry> made;
  for (const auto& [name, piece] : pieces) {
    auto found = where_.find(piece.source);
    check(found != where_.end(), "{}: no weight named '{}' to take {} from", origin_.string(),
          piece.source, name);
    const Entry& source = found->second;
    check(source.rows.empty() && !piece.rows.empty() && !source.replaced,
          "{}: {} cannot be cut from {} twice", origin_.string(), name, piece.source);
    const TensorInfo& whole = whole_info(source);
    check(!whole.shape.empty(), "{}: {} is a scalar; it has no rows for {}", origin_.string(),
          piece.source, name);
    const int64_t rows = whole.shape[0];
    int64_t total = 0;
    for (const RowRange& range : piece.rows) {
      check(range.begin >= 0 && range.count > 0 && range.begin + range.count <= rows,
            "{}: rows [{}, {}) of {} (shape {}) for {} are outside it", origin_.string(),
            range.begin, range.begin + range.count, piece.source, shape_string(whole.shape), name);
      total += range.count;
    }
    // The bytes the rows span, for the memory figures (a row is the same size throughout).
    const size_t row_bytes = (whole.end - whole.begin) / size_t(rows);
    auto info = std::make_shared<TensorInfo>(whole);
    info->shape[0] = total;
    info->begin = whole.begin + size_t(piece.rows[0].begin) * row_bytes;
    info->end = info->begin + size_t(total) * row_bytes;
    Entry entry = source;
    entry.rows = piece.rows;
    entry.pieces_info = std::move(info);
    made.emplace(name, std::move(entry));
  }
  for (const auto& [name, piece] : pieces) store.where_.erase(piece.source);
  for (auto& [name, entry] : made)
    check(store.where_.emplace(name, std::move(entry)).second,
          "{}: two weights are both named {} here", origin_.string(), name);
  return store;
}

WeightStore WeightStore::open_folder(const fs::path& folder) {
  check(fs::is_directory(folder), "{} is not a folder", folder.string());
  std::vector<fs::path> indexes, singles;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".safetensors.index.json"))
      indexes.push_back(entry.path());
    else if (name.ends_with(".safetensors"))
      singles.push_back(entry.path());
  }
  std::sort(indexes.begin(), indexes.end());
  std::sort(singles.begin(), singles.end());

  if (indexes.empty()) {
    if (singles.empty()) {  // one GGUF file instead (a quantized checkpoint beside config.json)
      std::vector<fs::path> ggufs;
      for (const auto& entry : fs::directory_iterator(folder))
        if (entry.path().extension() == ".gguf") ggufs.push_back(entry.path());
      check(ggufs.size() <= 1, "{} holds {} *.gguf files; keep one", folder.string(), ggufs.size());
      if (ggufs.size() == 1) {
        WeightStore store = open_gguf(ggufs[0]);
        store.origin_ = ggufs[0];
        return store;
      }
    }
    check(!singles.empty(),
          "{} holds no *.safetensors (or *.gguf) weights; download the component's weights or fix "
          "--<component>-path",
          folder.string());
    check(singles.size() == 1,
          "{} holds {} *.safetensors files but no *.safetensors.index.json saying how they fit "
          "together",
          folder.string(), singles.size());
    WeightStore store = open_file(singles[0]);
    store.origin_ = folder;
    return store;
  }
  check(indexes.size() == 1, "{} holds {} *.safetensors.index.json files; keep one",
        folder.string(), indexes.size());

  const fs::path& index_path = indexes[0];
  const json index =
      parse_json(read_text_file(index_path), index_path.string(), "re-download the weight index",
                 /*unique_keys=*/true);  // a tensor given two shards: which one is meant?
  check(index.is_object(), "{}: not a JSON object", index_path.string());
  check(index.contains("weight_map") && index["weight_map"].is_object(),
        "{}: no 'weight_map' object", index_path.string());
  WeightStore store;
  store.origin_ = folder;
  std::map<std::string, size_t> shard_index;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    check(it->is_string(), "{}: weight_map entry '{}' is not a file name", index_path.string(),
          it.key());
    const std::string shard = it->get<std::string>();
    // A shard is a file beside the index: no folders, no way out of the component folder.
    check(!shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
          "{}: shard name '{}' is not a plain file name", index_path.string(), shard);
    auto [found, inserted] = shard_index.try_emplace(shard, store.files_.size());
    if (inserted) store.files_.push_back(SafetensorsFile::open(folder / shard));
    check(store.files_[found->second].has(it.key()), "{}: names '{}' in {}, which does not hold it",
          index_path.string(), it.key(), shard);
    store.where_[it.key()] = {found->second, it.key()};
  }
  store.attach_fp8_scales();
  return store;
}

const TensorInfo& WeightStore::info(const std::string& name) const {
  auto it = where_.find(name);
  check(it != where_.end(),
        "{}: no weight named '{}'; the checkpoint does not match the model's config",
        origin_.string(), name);
  return stored_info(it->second);
}

const std::string& WeightStore::stored_name(const std::string& name) const {
  info(name);  // names the missing weight
  return where_.at(name).stored;
}

Tensor WeightStore::whole_tensor(const Entry& where) const {
  if (where.replaced) return *where.replaced;
  const TensorInfo& entry = whole_info(where);
  if (where.file == kGguf) return gguf_->to_f32(where.stored).view(entry.shape);
  if (entry.dtype == DType::F8E4M3)
    return fp8::to_rows(files_[where.file].tensor(where.stored), fp8_scale(where)).to(DType::F32);
  return files_[where.file].tensor(where.stored);
}

namespace {

// The rows of `whole` that `rows` names, in order: a view for one range, else a copy.
Tensor take_rows(const Tensor& whole, const std::vector<WeightStore::RowRange>& rows) {
  if (rows.empty()) return whole;
  if (rows.size() == 1) return whole.slice(0, rows[0].begin, rows[0].begin + rows[0].count);
  Shape shape = whole.shape();
  shape[0] = 0;
  for (const auto& range : rows) shape[0] += range.count;
  Tensor result = Tensor::empty(shape, whole.dtype());
  int64_t at = 0;
  for (const auto& range : rows) {
    result.slice(0, at, at + range.count)
        .copy_from(whole.slice(0, range.begin, range.begin + range.count));
    at += range.count;
  }
  return result;
}

}  // namespace

Tensor WeightStore::get(const std::string& name) const {
  info(name);  // names the missing weight
  const Entry& where = where_.at(name);
  return take_rows(whole_tensor(where), where.rows).with_low_rank(where.low_rank);
}

std::string WeightStore::stored_type(const std::string& name) const {
  const TensorInfo& entry = info(name);
  const Entry& where = where_.at(name);
  if (where.replaced) return std::string(dtype_name(entry.dtype));
  if (where.file == kGguf)
    if (const gguf::GgufTensorInfo* stored = gguf_->find(where.stored))
      if (const gguf::GgmlTypeInfo* type = gguf::ggml_type_info(uint32_t(stored->type)))
        return std::string(type->name);
  return std::string(dtype_name(entry.dtype));
}

DType WeightStore::product_dtype(const std::string& name) const {
  const TensorInfo& entry = info(name);
  const Entry& where = where_.at(name);
  if (where.replaced) return entry.dtype;
  if (where.file == kGguf) {
    const gguf::GgufTensorInfo* stored = gguf_->find(where.stored);
    // A quantized matrix kept in its stored shape (not one a converter flattened) stays blocks.
    const DType blocks = stored ? gguf::block_dtype(stored->type).value_or(DType::F32) : DType::F32;
    // (Of several row ranges a copy is made: float32.)
    const TensorInfo& whole = whole_info(where);
    if (dtype_is_blocks(blocks) && whole.shape.size() == 2 && whole.shape == stored->shape &&
        whole.shape[1] % dtype_block_values(blocks) == 0 && where.rows.size() <= 1)
      return blocks;
    return DType::F32;
  }
  // e4m3 rows cut from a matrix would lose their scales' rows: those read as float32.
  if (entry.dtype == DType::F8E4M3)
    return entry.shape.size() == 2 && where.rows.empty() ? DType::F8E4M3Rows : DType::F32;
  return entry.dtype;
}

Tensor WeightStore::get_for_product(const std::string& name) const {
  const DType dtype = product_dtype(name);
  const Entry& where = where_.at(name);
  if (dtype_is_blocks(dtype))
    return take_rows(gguf_->quantized_blocks(where.stored), where.rows)
        .with_low_rank(where.low_rank);
  if (dtype == DType::F8E4M3Rows)
    return fp8::to_rows(files_[where.file].tensor(where.stored), fp8_scale(where))
        .with_low_rank(where.low_rank);
  return get(name);
}

Tensor WeightStore::get_f32(const std::string& name) const {
  return get(name).to(DType::F32);
}

Tensor WeightStore::get_f32(const std::string& name, const Shape& expected) const {
  const TensorInfo& entry = info(name);
  check(entry.shape == expected, "{}: weight '{}' has shape {} but the config implies {}",
        origin_.string(), name, shape_string(entry.shape), shape_string(expected));
  return get_f32(name);
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : where_) names.push_back(name);
  return names;
}

std::vector<fs::path> WeightStore::files() const {
  std::vector<fs::path> paths;
  for (const auto& file : files_) paths.push_back(file.path());
  if (gguf_) paths.push_back(gguf_->path());
  return paths;
}

size_t WeightStore::stored_bytes() const {
  size_t total = companion_bytes_;
  for (const auto& [name, where] : where_) {
    const TensorInfo& entry = stored_info(where);
    total += entry.end - entry.begin;
  }
  return total;
}

void write_safetensors(const fs::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorToStore> stored;
  for (const auto& entry : tensors)
    stored.push_back({entry.first, entry.second.dtype(), entry.second.shape(),
                      [&entry] { return entry.second; }});
  write_safetensors(path, stored, metadata);
}

void write_safetensors(const fs::path& path, const std::vector<TensorToStore>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const TensorToStore& tensor : tensors) {
    const std::string& name = tensor.name;
    check(name != "__metadata__", "a tensor cannot be named __metadata__");
    check(!header.contains(name), "tensor name '{}' given twice", name);
    check(!dtype_safetensors_name(tensor.dtype).empty(),
          "tensor '{}': safetensors has no {} type; convert it first", name,
          dtype_name(tensor.dtype));
    const size_t bytes = size_t(shape_numel(tensor.shape)) * dtype_size(tensor.dtype);
    header[name] = {{"dtype", dtype_safetensors_name(tensor.dtype)},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  write_atomically(path, [&](const fs::path& temporary) {
    std::ofstream out(temporary, std::ios::binary);
    check(bool(out), "cannot write {}; check that the folder is writable", path.string());
    uint64_t length = text.size();
    char length_bytes[8];
    for (int i = 0; i < 8; ++i) length_bytes[i] = char((length >> (8 * i)) & 0xff);
    out.write(length_bytes, 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const TensorToStore& tensor : tensors) {
      const Tensor contiguous = tensor.load().contiguous();
      check(contiguous.dtype() == tensor.dtype && contiguous.shape() == tensor.shape,
            "writing {}: tensor '{}' came as {} {}, its header says {} {}", path.string(),
            tensor.name, dtype_name(contiguous.dtype()), shape_string(contiguous.shape()),
            dtype_name(tensor.dtype), shape_string(tensor.shape));
      out.write(reinterpret_cast<const char*>(contiguous.raw()),
                std::streamsize(contiguous.nbytes()));
    }
    out.close();
    check(bool(out), "writing {} failed (disk full?)", path.string());
  });
}

}  // namespace mmgen

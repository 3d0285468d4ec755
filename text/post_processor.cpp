#include "text/post_processor.h"

namespace mmgen::tokenizers {
namespace {

// A single-sequence template: fixed ids before and after the sequence.
class WrapProcessor final : public PostProcessor {
 public:
  WrapProcessor(std::vector<int64_t> before, std::vector<int64_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  size_t added_count() const override { return before_.size() + after_.size(); }
  std::vector<int64_t> process(std::vector<int64_t> ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
    return ids;
  }

 private:
  std::vector<int64_t> before_, after_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  size_t added_count() const override {
    size_t total = 0;
    for (const auto& step : steps_) total += step->added_count();
    return total;
  }
  std::vector<int64_t> process(std::vector<int64_t> ids) const override {
    for (const auto& step : steps_) ids = step->process(std::move(ids));
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::unique_ptr<PostProcessor> make_template(const Json& spec, const std::string& where) {
  const Json& single = array_field(spec, "single", where);
  const Json& specials = field(spec, "special_tokens", where);
  std::vector<int64_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    std::string item = fmt::format("{}.single[{}]", where, i);
    const Json& piece = single[i];
    if (piece.is_object() && piece.contains("Sequence")) {
      check(!seen_sequence, "{}: the single-sequence template names a sequence twice", where);
      seen_sequence = true;
      continue;
    }
    const Json& special = field(piece, "SpecialToken", item);
    std::string name = string_field(special, "id", item + ".SpecialToken");
    check(specials.is_object() && specials.contains(name),
          "{}: special token '{}' is used but not listed in special_tokens", item, name);
    // (A named string, not a temporary: GCC 13 takes a reference returned next to a temporary
    // argument for a dangling one.)
    const std::string specials_where = fmt::format("{}.special_tokens", where);
    const Json& ids = array_field(specials[name], "ids", specials_where);
    for (const Json& id : ids) {
      check(id.is_number_integer(), "{}.special_tokens['{}'].ids should be integers", where, name);
      (seen_sequence ? after : before).push_back(id.get<int64_t>());
    }
  }
  check(seen_sequence, "{}: the single-sequence template has no Sequence item", where);
  return std::make_unique<WrapProcessor>(std::move(before), std::move(after));
}

int64_t id_of_pair(const Json& spec, const char* key, const std::string& where) {
  const Json& pair = field(spec, key, where);
  check(pair.is_array() && pair.size() == 2 && pair[1].is_number_integer(),
        "{}.{} should be a [token, id] pair", where, key);
  return pair[1].get<int64_t>();
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  std::string type = string_field(spec, "type", where);
  if (type == "TemplateProcessing") return make_template(spec, where);
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return std::make_unique<WrapProcessor>(std::vector<int64_t>{id_of_pair(spec, "cls", where)},
                                           std::vector<int64_t>{id_of_pair(spec, "sep", where)});
  if (type == "ByteLevel")
    return std::make_unique<WrapProcessor>(std::vector<int64_t>{}, std::vector<int64_t>{});
  if (type == "Sequence") {
    const Json& items = array_field(spec, "processors", where);
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < items.size(); ++i)
      if (auto step = make_post_processor(items[i], fmt::format("{}.processors[{}]", where, i)))
        steps.push_back(std::move(step));
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  fail(
      "{}: post-processor type '{}' is not supported by mmgen (supported: TemplateProcessing, "
      "BertProcessing, RobertaProcessing, ByteLevel, Sequence)",
      where, type);
}

}  // namespace mmgen::tokenizers

#include "core/json.h"

#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"

namespace mmgen {

using json = nlohmann::json;

namespace {

// Builds the document from nlohmann's SAX events: its DOM parser cannot bound the depth (a
// callback can, but with one the parser searches the enclosing container at every object's end:
// a file of 300k `{}` took 22 s) nor notice a key given twice. Linear in the text.
class DomBuilder {
 public:
  DomBuilder(json& root, bool unique_keys) : root_(root), unique_keys_(unique_keys) {}

  bool null() { return put(nullptr); }
  bool boolean(bool value) { return put(value); }
  bool number_integer(json::number_integer_t value) { return put(value); }
  bool number_unsigned(json::number_unsigned_t value) { return put(value); }
  bool number_float(json::number_float_t value, const std::string&) { return put(value); }
  bool string(std::string& value) { return put(std::move(value)); }
  bool binary(json::binary_t& value) { return put(std::move(value)); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& name) {
    if (unique_keys_ && open_.back()->contains(name)) {
      problem_ = "the key \"" + text_for_message(name) + "\" appears twice in one object";
      return false;
    }
    key_ = std::move(name);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." or, for a number
    // past double's range, "[json.exception.out_of_range.406] number overflow parsing '1e999'".
    std::string reason = e.what();
    if (const size_t at = reason.find("] ");
        reason.starts_with("[json.") && at != std::string::npos)
      reason.erase(0, at + 2);
    // The parser quotes what it last read, which can be most of a truncated file.
    problem_ = text_for_message(reason, 240);
    return false;
  }

  bool too_deep() const { return too_deep_; }
  const std::string& problem() const { return problem_; }

 private:
  json* place(json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[key_];  // a repeated key's last value wins, as in Python
    slot = std::move(value);
    return &slot;
  }
  bool put(json&& value) {
    place(std::move(value));
    return true;
  }
  bool open(json&& container) {
    if (open_.size() >= size_t(kMaxJsonDepth)) {
      too_deep_ = true;
      return false;
    }
    // The pointer stays valid: the parent gains no other element while this one is open.
    open_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  json& root_;
  const bool unique_keys_;
  std::vector<json*> open_;
  std::string key_;
  bool too_deep_ = false;
  std::string problem_;
};

}  // namespace

json parse_json(std::string_view text, const std::string& where, std::string_view fix,
                bool unique_keys) {
  json root;
  DomBuilder builder(root, unique_keys);
  if (json::sax_parse(text, &builder)) return root;
  check(!builder.too_deep(), "{}: JSON nested deeper than {} levels; {}", where, kMaxJsonDepth,
        fix);
  fail("{}: malformed JSON ({}); {}", where, builder.problem(), fix);
}

std::string json_for_message(const json& value) {
  return text_for_message(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

json read_json_object(const std::filesystem::path& path, bool unique_keys) {
  const json value = parse_json(read_text_file(path), path.string(),
                                "fix the file or download it again", unique_keys);
  check(value.is_object(), "{}: expected a JSON object at the top level", path.string());
  return value;
}

}  // namespace mmgen

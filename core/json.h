// JSON text from untrusted files and flags, parsed with one set of rules: malformed text, numbers
// past double's range and nesting deeper than kMaxJsonDepth are mmgen::Errors that name the
// source. nlohmann's parser is iterative, but copying, comparing and printing a value recurse once
// per level, so a file of 60 000 nested brackets overflowed the stack later on. Parsing is linear
// in the text (tests/hostile_inputs_test.cpp holds it to that).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/limits.h"

namespace mmgen {

// Deeper documents are refused (core/limits.h).
constexpr int kMaxJsonDepth = Limits::kMaxJsonDepth;

// Parses `text`. Errors read "<where>: malformed JSON (<reason>); <fix>". With `unique_keys`, an
// object that names a key twice is refused (a safetensors header: the shadowed entry's offsets
// would never be checked); otherwise the last value wins, as Python's json module does.
nlohmann::json parse_json(std::string_view text, const std::string& where, std::string_view fix,
                          bool unique_keys = false);

// A JSON value from an untrusted file as a message quotes it: compact, invalid UTF-8 replaced,
// control characters escaped and cut past 120 characters (core/text.h's text_for_message).
std::string json_for_message(const nlohmann::json& value);

// Parses a JSON file into an object, with one-line errors naming the file and the position;
// `unique_keys` as for parse_json (settings files: a key given twice is refused).
nlohmann::json read_json_object(const std::filesystem::path& path, bool unique_keys = false);

}  // namespace mmgen

#include "text/regex.h"

#include <array>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/limits.h"
#include "text/unicode_data.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
// Named, not anonymous: Regex::Program (external linkage) holds these types, and GCC warns
// (-Wsubobject-linkage) when a unity build includes this file after another.
namespace regex_internal {

// A non-owning reference to a callable, so continuations cost no allocation.
template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  FunctionRef(const F& f)  // NOLINT(google-explicit-constructor): meant to convert implicitly
      : object_(&f), call_([](const void* o, Args... args) -> R {
          return (*static_cast<const F*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  const void* object_;
  R (*call_)(const void*, Args...);
};

using Continuation = FunctionRef<bool(size_t)>;

enum ClassBit : uint32_t {
  kLetter = 1u << 0,
  kNotLetter = 1u << 1,
  kNumber = 1u << 2,
  kNotNumber = 1u << 3,
  kSpace = 1u << 4,
  kNotSpace = 1u << 5,
  kDigit = 1u << 6,
  kNotDigit = 1u << 7,
  kWord = 1u << 8,
  kNotWord = 1u << 9,
  kAnyButNewline = 1u << 10,
};

struct CharTest {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  uint32_t classes = 0;
  bool negated = false;
  bool fold_case = false;

  bool in_ranges(char32_t c) const {
    for (const auto& [first, last] : ranges)
      if (c >= first && c <= last) return true;
    return false;
  }
  bool in_classes(char32_t c) const {
    if (classes == 0) return false;
    auto has = [&](uint32_t bit) { return (classes & bit) != 0; };
    if (has(kLetter) && unicode::is_letter(c)) return true;
    if (has(kNotLetter) && !unicode::is_letter(c)) return true;
    if (has(kNumber) && unicode::is_number(c)) return true;
    if (has(kNotNumber) && !unicode::is_number(c)) return true;
    if (has(kSpace) && unicode::is_white_space(c)) return true;
    if (has(kNotSpace) && !unicode::is_white_space(c)) return true;
    if (has(kDigit) && unicode::is_decimal_digit(c)) return true;
    if (has(kNotDigit) && !unicode::is_decimal_digit(c)) return true;
    if (has(kWord) && unicode::is_word(c)) return true;
    if (has(kNotWord) && !unicode::is_word(c)) return true;
    if (has(kAnyButNewline) && c != '\n') return true;
    return false;
  }
  bool matches_plain(char32_t c) const { return in_ranges(c) || in_classes(c); }
  bool matches(char32_t c) const {
    bool hit = matches_plain(c);
    if (!hit && fold_case) {
      for (char32_t variant : case_variants(c))
        if (variant != 0 && matches_plain(variant)) {
          hit = true;
          break;
        }
    }
    return hit != negated;
  }
  static std::array<char32_t, 3> case_variants(char32_t c) {
    if (c < 0x80 && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) {
      char32_t lower = c | 0x20;
      char32_t extra = lower == 's' ? 0x17F : lower == 'k' ? 0x212A : 0;
      return {lower, lower & ~char32_t(0x20), extra};
    }
    if (c == 0x17F) return {'s', 'S', 0};
    if (c == 0x212A) return {'k', 'K', 0};
    return {0, 0, 0};
  }
};

enum class Kind { Char, Sequence, Alternation, Repeat, LookAhead, Begin, End };

struct Node {
  explicit Node(Kind k) : kind(k) {}
  Kind kind;
  CharTest test;              // Char
  std::vector<int> children;  // Sequence, Alternation; Repeat/LookAhead use children[0]
  size_t min = 0, max = 0;    // Repeat
  bool greedy = true;         // Repeat
  bool negative = false;      // LookAhead
};

constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();

}  // namespace regex_internal
using namespace regex_internal;

struct Regex::Program {
  std::vector<Node> nodes;
  int root = -1;

  // Matching state for one search. Backtracking recurses once per node on the way to a match,
  // so a repeated group recurses once per repetition, and a pattern like (a+)+b backtracks
  // exponentially: both are bounded (core/limits.h) and refused with an Error naming the pattern,
  // where they would overflow the stack or hang. The tokenizers' real patterns stay far below.
  struct Matcher {
    const Program& program;
    const std::u32string& text;
    const std::string& pattern;
    size_t step_budget;
    mutable size_t steps = 0;
    mutable int depth = 0;

    bool match(int index, size_t pos, Continuation next) const {
      check(++steps <= step_budget,
            "tokenizer regex '{}' needs more than {} steps on a text of {} characters (its "
            "backtracking grows too fast); this tokenizer.json pattern is not supported",
            pattern, step_budget, text.size());
      check(depth < Limits::kMaxRegexMatchDepth,
            "tokenizer regex '{}' recurses deeper than {} levels on this text (a repeated group "
            "matched too many times); shorten the prompt or use a supported tokenizer",
            pattern, Limits::kMaxRegexMatchDepth);
      ++depth;
      const bool found = match_node(index, pos, next);
      --depth;
      return found;
    }

    bool match_node(int index, size_t pos, Continuation next) const {
      const Node& node = program.nodes[size_t(index)];
      switch (node.kind) {
        case Kind::Char:
          return pos < text.size() && node.test.matches(text[pos]) && next(pos + 1);
        case Kind::Sequence:
          return match_sequence(node, 0, pos, next);
        case Kind::Alternation:
          for (int child : node.children)
            if (match(child, pos, next)) return true;
          return false;
        case Kind::Repeat:
          return match_repeat(node, pos, next);
        case Kind::LookAhead: {
          bool found = match(node.children[0], pos, [](size_t) { return true; });
          return found != node.negative && next(pos);
        }
        case Kind::Begin:
          return pos == 0 && next(pos);
        case Kind::End:
          return pos == text.size() && next(pos);
      }
      return false;
    }

    bool match_sequence(const Node& node, size_t item, size_t pos, Continuation next) const {
      if (item == node.children.size()) return next(pos);
      return match(node.children[item], pos,
                   [&](size_t after) { return match_sequence(node, item + 1, after, next); });
    }

    bool match_repeat(const Node& node, size_t pos, Continuation next) const {
      const Node& child = program.nodes[size_t(node.children[0])];
      if (child.kind == Kind::Char) {
        // A repeated single character: count the run, then try lengths without recursion.
        size_t run = 0;
        while (run < node.max && pos + run < text.size() && child.test.matches(text[pos + run]))
          ++run;
        if (run < node.min) return false;
        if (node.greedy) {
          for (size_t n = run + 1; n-- > node.min;)
            if (next(pos + n)) return true;
        } else {
          for (size_t n = node.min; n <= run; ++n)
            if (next(pos + n)) return true;
        }
        return false;
      }
      return repeat_general(node, 0, pos, next);
    }

    bool repeat_general(const Node& node, size_t count, size_t pos, Continuation next) const {
      auto more = [&]() {
        return count < node.max && match(node.children[0], pos, [&](size_t after) {
                 if (after == pos) return false;  // an empty iteration would loop forever
                 return repeat_general(node, count + 1, after, next);
               });
      };
      if (node.greedy) {
        if (more()) return true;
        return count >= node.min && next(pos);
      }
      if (count >= node.min && next(pos)) return true;
      return more();
    }
  };
};

namespace {

class Parser {
 public:
  Parser(std::u32string pattern, const std::string& source, std::vector<Node>& nodes)
      : pattern_(std::move(pattern)), source_(source), nodes_(nodes) {}

  int parse() {
    int root = parse_alternation();
    if (pos_ < pattern_.size()) error("unbalanced ')'");
    return root;
  }

 private:
  std::u32string pattern_;
  const std::string& source_;
  std::vector<Node>& nodes_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool fold_case_ = false;

  [[noreturn]] void error(const std::string& what) const {
    fail(
        "tokenizer regex '{}': {} at character {}; mmgen's regex engine supports the subset "
        "used by tokenizer.json files (see text/regex.h)",
        source_, what, pos_);
  }
  bool at_end() const { return pos_ >= pattern_.size(); }
  char32_t peek() const { return at_end() ? 0 : pattern_[pos_]; }
  bool accept(char32_t c) {
    if (!at_end() && pattern_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  int add(Node node) {
    nodes_.push_back(std::move(node));
    return int(nodes_.size() - 1);
  }

  int parse_alternation() {
    std::vector<int> branches{parse_sequence()};
    while (accept('|')) branches.push_back(parse_sequence());
    if (branches.size() == 1) return branches[0];
    Node node{Kind::Alternation};
    node.children = std::move(branches);
    return add(std::move(node));
  }

  int parse_sequence() {
    Node node{Kind::Sequence};
    while (!at_end() && peek() != '|' && peek() != ')') {
      int atom = parse_atom();
      if (atom < 0) continue;  // an inline flag group such as (?i)
      node.children.push_back(parse_quantifier(atom));
    }
    if (node.children.size() == 1) return node.children[0];
    return add(std::move(node));
  }

  int parse_quantifier(int atom) {
    size_t min = 0, max = 0;
    if (accept('*')) {
      min = 0, max = kUnbounded;
    } else if (accept('+')) {
      min = 1, max = kUnbounded;
    } else if (accept('?')) {
      min = 0, max = 1;
    } else if (peek() == '{' && parse_braces(min, max)) {
    } else {
      return atom;
    }
    Node node{Kind::Repeat};
    node.children = {atom};
    node.min = min;
    node.max = max;
    if (accept('?')) node.greedy = false;
    if (peek() == '+') error("possessive quantifiers are not supported");
    if (peek() == '*' || peek() == '+' || peek() == '{') error("nested quantifier");
    return add(std::move(node));
  }

  // {n}, {n,}, {n,m}; returns false (and consumes nothing) when '{' is a literal.
  bool parse_braces(size_t& min, size_t& max) {
    size_t save = pos_;
    ++pos_;
    auto number = [&](size_t& out) {
      size_t start = pos_;
      out = 0;
      while (!at_end() && peek() >= '0' && peek() <= '9') out = out * 10 + (pattern_[pos_++] - '0');
      return pos_ > start;
    };
    if (!number(min)) {
      pos_ = save;
      return false;
    }
    max = min;
    if (accept(',')) {
      if (!number(max)) max = kUnbounded;
    }
    if (!accept('}') || max < min) {
      pos_ = save;
      return false;
    }
    return true;
  }

  int char_node(CharTest test) {
    Node node{Kind::Char};
    test.fold_case = fold_case_;
    node.test = std::move(test);
    return add(std::move(node));
  }

  // Returns -1 for groups that only set flags.
  int parse_atom() {
    char32_t c = pattern_[pos_++];
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return char_node(parse_class());
      case '.': {
        CharTest test;
        test.classes = kAnyButNewline;
        return char_node(test);
      }
      case '^':
        return add(Node(Kind::Begin));
      case '$':
        return add(Node(Kind::End));
      case '\\': {
        CharTest test;
        parse_escape(test);
        return char_node(test);
      }
      case '*':
      case '+':
      case '?':
        error("quantifier without anything to repeat");
      default: {
        CharTest test;
        test.ranges.push_back({c, c});
        return char_node(test);
      }
    }
  }

  int parse_group() {
    // The parser and the matcher recurse per level: 30 000 nested groups overflowed the stack.
    // Tokenizer patterns nest two or three deep.
    constexpr int kMaxGroupDepth = Limits::kMaxRegexGroupDepth;
    if (++depth_ > kMaxGroupDepth)
      error(fmt::format("groups nested deeper than {} levels", kMaxGroupDepth));
    bool saved_fold = fold_case_;
    int result;
    if (accept('?')) {
      if (accept(':')) {
        result = parse_alternation();
      } else if (accept('=') || peek() == '!') {
        bool negative = accept('!');
        Node node{Kind::LookAhead};
        node.negative = negative;
        node.children = {parse_alternation()};
        result = add(std::move(node));
      } else if (peek() == 'i' || peek() == '-') {
        bool on = !accept('-');
        if (!accept('i')) error("unsupported group flag");
        if (accept(')')) {  // (?i): applies to the rest of the enclosing group
          fold_case_ = on;
          --depth_;
          return -1;
        }
        if (!accept(':')) error("unsupported group flag");
        fold_case_ = on;
        result = parse_alternation();
      } else {
        error("unsupported group kind (look-behind, named or atomic groups)");
      }
    } else {
      result = parse_alternation();  // capturing groups are not needed: treated as (?:...)
    }
    if (!accept(')')) error("missing ')'");
    fold_case_ = saved_fold;
    --depth_;
    return result;
  }

  // Parses after '\\' into `test`; returns the literal code point or 0 for a class escape.
  char32_t parse_escape(CharTest& test) {
    if (at_end()) error("pattern ends with '\\'");
    char32_t c = pattern_[pos_++];
    auto literal = [&](char32_t value) {
      test.ranges.push_back({value, value});
      return value;
    };
    switch (c) {
      case 's':
        test.classes |= kSpace;
        return 0;
      case 'S':
        test.classes |= kNotSpace;
        return 0;
      case 'd':
        test.classes |= kDigit;
        return 0;
      case 'D':
        test.classes |= kNotDigit;
        return 0;
      case 'w':
        test.classes |= kWord;
        return 0;
      case 'W':
        test.classes |= kNotWord;
        return 0;
      case 'p':
      case 'P': {
        std::u32string name;
        if (accept('{')) {
          while (!at_end() && peek() != '}') name += pattern_[pos_++];
          if (!accept('}')) error("missing '}' in \\p{...}");
        } else if (!at_end()) {
          name = pattern_[pos_++];
        }
        bool negated = c == 'P';
        if (!name.empty() && name[0] == '^') {
          negated = !negated;
          name.erase(0, 1);
        }
        if (name == U"L" || name == U"Letter")
          test.classes |= negated ? kNotLetter : kLetter;
        else if (name == U"N" || name == U"Number")
          test.classes |= negated ? kNotNumber : kNumber;
        else
          error("unsupported Unicode property (only \\p{L} and \\p{N})");
        return 0;
      }
      case 'r':
        return literal('\r');
      case 'n':
        return literal('\n');
      case 't':
        return literal('\t');
      case 'f':
        return literal('\f');
      case 'v':
        return literal('\v');
      case 'x': {
        char32_t value = 0;
        if (accept('{')) {
          while (!at_end() && peek() != '}') value = value * 16 + hex_digit(pattern_[pos_++]);
          if (!accept('}')) error("missing '}' in \\x{...}");
        } else {
          for (int i = 0; i < 2 && !at_end(); ++i) value = value * 16 + hex_digit(pattern_[pos_++]);
        }
        return literal(value);
      }
      case 'u': {
        char32_t value = 0;
        for (int i = 0; i < 4; ++i) {
          if (at_end()) error("short \\u escape");
          value = value * 16 + hex_digit(pattern_[pos_++]);
        }
        return literal(value);
      }
      default:
        if ((c < 0x80 && unicode::is_word(c)))
          error("unsupported escape");  // \b, \A, \1 ... would silently mean something else
        return literal(c);
    }
  }

  char32_t hex_digit(char32_t c) const {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    error("bad hexadecimal digit");
  }

  CharTest parse_class() {
    CharTest test;
    test.negated = accept('^');
    bool first = true;
    while (true) {
      if (at_end()) error("missing ']'");
      char32_t c = pattern_[pos_];
      if (c == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      ++pos_;
      if (c == '[') error("nested character classes are not supported");
      char32_t low = c;
      if (c == '\\') {
        CharTest item;
        low = parse_escape(item);
        if (low == 0 && item.ranges.empty()) {  // a class escape such as \s or \p{L}
          test.classes |= item.classes;
          continue;
        }
      }
      char32_t high = low;
      if (peek() == '-' && pos_ + 1 < pattern_.size() && pattern_[pos_ + 1] != ']') {
        ++pos_;
        char32_t d = pattern_[pos_++];
        if (d == '\\') {
          CharTest item;
          d = parse_escape(item);
          if (item.ranges.empty()) error("class escape used as a range end");
        }
        high = d;
        if (high < low) error("range out of order");
      }
      test.ranges.push_back({low, high});
    }
    return test;
  }
};

}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern), program_(std::make_unique<Program>()) {
  Parser parser(to_codepoints(pattern), pattern_, program_->nodes);
  program_->root = parser.parse();
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<Regex::Match> Regex::find_all(std::string_view text) const {
  std::u32string codepoints;
  std::vector<size_t> offsets;  // byte offset of each code point, plus the end
  codepoints.reserve(text.size());
  offsets.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    offsets.push_back(pos);
    codepoints += next_codepoint(text, pos);
  }
  offsets.push_back(text.size());

  Program::Matcher matcher{
      *program_, codepoints, pattern_,
      Limits::kRegexStepsPerCharacter * (codepoints.size() + 1) + Limits::kRegexBaseSteps};
  std::vector<Match> matches;
  size_t start = 0;
  while (start < codepoints.size()) {
    size_t end = 0;
    bool found = false;
    size_t at = start;
    for (; at <= codepoints.size(); ++at) {
      found = matcher.match(program_->root, at, [&](size_t e) {
        end = e;
        return true;
      });
      if (found) break;
    }
    if (!found) break;
    if (end == at) {  // empty match: nothing to report, move on
      start = at + 1;
      continue;
    }
    matches.push_back({offsets[at], offsets[end]});
    start = end;
  }
  return matches;
}

}  // namespace mmgen::tokenizers

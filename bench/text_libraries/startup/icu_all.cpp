// ICU for everything the tokenizers would use: NFC, lowercase, categories, grapheme breaks.
#include <unicode/brkiter.h>
#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <cstdio>
#include <string>
int main() {
  UErrorCode err = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  icu::Normalizer2::getNFCInstance(err)->normalizeUTF8(0, "Cafe\xCC\x81", sink, nullptr, err);
  icu::CaseMap::utf8ToLower("", 0, "ABC", sink, nullptr, err);
  icu::BreakIterator* bi = icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), err);
  icu::UnicodeString s = icu::UnicodeString::fromUTF8("abc");
  bi->setText(s);
  std::printf("%zu %d %d %d\n", out.size(), int(u_charType(0x41)), bi->next(), int(err));
}

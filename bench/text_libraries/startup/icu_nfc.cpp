// First use of ICU: loads libicuuc + libicudata (dynamic) and the NFC data.
#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>
#include <cstdio>
#include <string>
int main() {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  nfc->normalizeUTF8(0, "Cafe\xCC\x81", sink, nullptr, err);
  std::printf("%zu %d\n", out.size(), int(err));
}

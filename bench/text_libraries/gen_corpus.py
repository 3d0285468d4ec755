#!/usr/bin/env python3
"""Deterministic mixed-text corpus for the tokenizer regex / Unicode measurement.

Writes corpus.bin: documents separated by NUL bytes. Categories: English prompts (contractions,
case, punctuation, numbers, code/URLs), CJK (Chinese, Japanese, Korean, CJK punctuation,
fullwidth), emoji (ZWJ, skin tones, flags, keycaps), accented Latin (NFC and NFD forms),
Greek/Cyrillic/Turkish, other scripts (Arabic, Hebrew, Devanagari, Thai), digits, whitespace
runs; then every string the tokenizer tests feed a tokenizer; and (corpus_stress.bin) one
document per block of 256 code points of all of Unicode (minus surrogates and NUL).
    python3 gen_corpus.py OUTDIR [MB]
"""
import json, os, random, sys, unicodedata

out_dir = sys.argv[1]
target = int(float(sys.argv[2] if len(sys.argv) > 2 else 4) * 1e6)
R = random.Random(20260501)

EN = ("a the of and to in with on at for from by over under through near beside cat dog fox robot "
      "astronaut castle forest river mountain city street night sunset sunrise beach ocean snow "
      "rain light shadow portrait landscape cinematic lighting highly detailed photo painting oil "
      "watercolor sketch render octane unreal engine 8k 4k hdr bokeh depth field wide angle lens "
      "red blue green yellow purple orange black white golden silver glowing neon dark bright soft "
      "sharp focus masterpiece best quality ultra realistic intricate elegant dramatic epic "
      "fantasy science fiction cyberpunk steampunk medieval futuristic ancient old young woman man "
      "child girl boy wearing holding standing sitting running flying dancing walking looking "
      "smiling crying reading writing playing is are was were be been it that this there their "
      "they we you he she his her its our not no very many much more most some any every each "
      "small large tiny huge beautiful ugly quick brown jumps lazy circle square triangle table "
      "chair window door house tree flower grass sky cloud star moon sun planet galaxy space "
      "background foreground style artist trending artstation concept art illustration anime "
      "manga comic book cover poster logo text sign says hello world").split()
CONTR = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'LL", "'D", "'M", "'Ve"]
PUNCT = [",", ".", "!", "?", ";", ":", "...", "!!!", "??", " -", " --", " —", " (", ")", "\"",
         "“", "”", "‘", "’", "'", "#", "@", "&", "%", "*", "/", "+", "=", "_", "|", "[", "]",
         "{", "}", "<", ">", "~", "^", "$", "€", "£", "¥", "©", "®", "™", "°", "•", "…"]
SPACES = [" ", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "  \n  ",
          "\u00a0", "\u2009", "\u3000", "\u2028", "\u0085", "\n\n\n    ", "\t\t"]
HANZI = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对"
         "可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老"
         "从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几"
         "很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水"
         "万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系"
         "东京夜景猫狗狐狸雪山森林城市灯光电影画风景人物照片")
KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげござじずぜぞだぢづでどばびぶべぼぱぴぷぺぽアイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンガギグゲゴザジズゼゾダヂヅデドバビブベボパピプペポー"
CJKP = ["、", "。", "「", "」", "『", "』", "！", "？", "（", "）", "：", "；", "・", "〜", "　"]
FULLW = "０１２３４５６７８９ＡＢＣａｂｃ"
EMOJI = ["😀", "😂", "🥲", "🦊", "🐱", "🐶", "🌸", "🔥", "✨", "❤️", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦",
         "🏳️‍🌈", "🇯🇵", "🇺🇸", "🇫🇷", "1️⃣", "#️⃣", "☕", "🎨", "🖼️", "📷", "🌍", "🚀", "🤖", "👁‍🗨",
         "🧑🏿‍🚀", "✌🏻", "⭐", "🌙", "☀️", "🍕"]
LATIN = ("café crème brûlée naïve résumé façade déjà vu über Straße Größe Mädchen Müller señor "
         "niño mañana jalapeño São Paulo coração ação Kraków Łódź źdźbło Dvořák Čapek Ångström "
         "Øresund smørrebrød Þingvellir Reykjavík İstanbul ılık ĞÜŞİÖÇ Việt Nam phở Hà Nội "
         "tiếng Việt Nguyễn ǅemal Œuvre œuf ﬁne ﬂower Ⅻ ½ ² ℃ ℡ ㎏ Å K").split()
GREEK = "ΣΟΦΙΑ σοφία Οδυσσεύς ΟΔΥΣΣΕΥΣ λόγος ΛΟΓΟΣ Ἀθῆναι ἄνθρωπος φιλοσοφία Σίσυφος".split()
CYR = "Москва привет мир ЁЛКА ёлка Щука Україна їжак Ґанок Српска Љубав".split()
OTHER = ["مرحبا بالعالم", "القاهرة ١٢٣٤", "שלום עולם", "ירושלים", "नमस्ते दुनिया", "हिन्दी भाषा",
         "क्षत्रिय", "สวัสดีชาวโลก", "ภาษาไทย", "ሰላም", "ქართული", "հայերեն", "ᠮᠣᠩᠭᠣᠯ", "ខ្មែរ",
         "ລາວ", "தமிழ்", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "සිංහල", "བོད་ཡིག", "한국어 텍스트", "서울 밤거리"]
HANGUL = [chr(c) for c in range(0xAC00, 0xD7A4, 97)]


def nfd_sometimes(s):
    return unicodedata.normalize("NFD", s) if R.random() < 0.3 else s


def english(n):
    out = []
    size = 0
    while size < n:
        w = R.choice(EN)
        r = R.random()
        if r < 0.15:
            w = w.capitalize()
        elif r < 0.18:
            w = w.upper()
        if R.random() < 0.06:
            w += R.choice(CONTR)
        if R.random() < 0.05:
            w = str(R.choice([R.randint(0, 9), R.randint(10, 99999), 2026, 1920, 3.14159, 0.5]))
            if R.random() < 0.3:
                w += R.choice(["k", "px", "%", "x1080", "mm", "s"])
        if R.random() < 0.02:
            w = R.choice(["https://example.com/a/b?c=1&d=2", "foo_bar(1, 2)", "x += y * 3;",
                          "#hashtag", "@user", "e-mail@example.org", "C++20", "v1.2.3", "3:45pm",
                          "2026-05-01", "$12.50", "<html>", "a/b/c.txt"])
        out.append(w)
        if R.random() < 0.12:
            out.append(R.choice(PUNCT))
        out.append(R.choice(SPACES) if R.random() < 0.15 else " ")
        size += len(w) + 1
    return "".join(out)


def cjk(n):
    out = []
    size = 0
    while size < n * 0.34:  # ~3 bytes per char
        r = R.random()
        if r < 0.5:
            s = "".join(R.choice(HANZI) for _ in range(R.randint(1, 12)))
        elif r < 0.75:
            s = "".join(R.choice(KANA + HANZI) for _ in range(R.randint(1, 10)))
        elif r < 0.9:
            s = "".join(R.choice(HANGUL) for _ in range(R.randint(1, 6))) + " "
        else:
            s = R.choice(FULLW) * R.randint(1, 3)
        out.append(s)
        out.append(R.choice(CJKP) if R.random() < 0.3 else (R.choice(EN) + " " if R.random() < 0.1 else ""))
        size += len(s) + 1
    return "".join(out)


def emoji(n):
    out = []
    size = 0
    while size < n:
        s = R.choice(EMOJI) if R.random() < 0.5 else R.choice(EN)
        out.append(s)
        out.append(R.choice([" ", "", "  ", "\n", "!", ", "]))
        size += len(s.encode())
    return "".join(out)


def latin(n):
    out = []
    size = 0
    pools = [LATIN, LATIN, GREEK, CYR, EN]
    while size < n:
        s = nfd_sometimes(R.choice(R.choice(pools)))
        if R.random() < 0.1:
            s = s.upper()
        out.append(s)
        out.append(R.choice(PUNCT) + " " if R.random() < 0.1 else R.choice(SPACES) if R.random() < 0.1 else " ")
        size += len(s.encode()) + 1
    return "".join(out)


def other(n):
    out = []
    size = 0
    while size < n:
        s = nfd_sometimes(R.choice(OTHER))
        out.append(s)
        out.append(R.choice([" ", "، ", ". ", "\n", "  ", "।"]))
        size += len(s.encode()) + 1
    return "".join(out)


def digits(n):
    out = []
    size = 0
    while size < n:
        r = R.random()
        if r < 0.4:
            s = str(R.randint(0, 10 ** R.randint(1, 20)))
        elif r < 0.6:
            s = f"{R.random() * 1000:.{R.randint(1, 6)}f}"
        elif r < 0.7:
            s = f"+1 ({R.randint(100, 999)}) {R.randint(100, 999)}-{R.randint(1000, 9999)}"
        elif r < 0.8:
            s = "".join(R.choice("٠١٢٣٤٥٦٧٨٩") for _ in range(R.randint(1, 6)))
        elif r < 0.9:
            s = R.choice(["²", "³", "½", "¼", "Ⅻ", "ⅷ", "①", "⑳", "१२३", "๑๒", "𝟙𝟚"]) + str(R.randint(0, 99))
        else:
            s = R.choice(EN)
        out.append(s)
        out.append(R.choice([" ", " ", ", ", "\n", "\t", "  ", "; ", "-", "/", ""]))
        size += len(s.encode()) + 1
    return "".join(out)


def whitespace(n):
    out = []
    size = 0
    while size < n:
        s = R.choice(SPACES) * R.randint(1, 8) + R.choice(EN + ["", "x", "1", "!"])
        out.append(s)
        size += len(s.encode())
    return "".join(out)


def mixed(n):
    parts = [english, cjk, emoji, latin, other, digits, whitespace]
    return "".join(R.choice(parts)(R.randint(50, 400)) for _ in range(max(1, n // 250)))


KINDS = [(english, 0.38), (cjk, 0.14), (emoji, 0.05), (latin, 0.12), (other, 0.05), (digits, 0.05),
         (whitespace, 0.03), (mixed, 0.18)]


def test_strings():
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    shared = os.path.join(src, "..", "shared")
    out = []
    for p in json.load(open(os.path.join(shared, "fixtures/wan-tiny/reference/tokenizer.json"))):
        out.append(p["text"])
    for p in json.load(open(os.path.join(shared, "fixtures/qwen3-tiny/reference/reference.json")))["prompts"]:
        out += [p["prompt"], p["templated"]]
    ref = json.load(open(os.path.join(src, "tests/fixtures/qwenimage-tiny/reference/reference.json")))
    for p in ref["prompts"]:
        out += [p, ref["template"].replace("{}", p)]
    for p in json.load(open(os.path.join(src, "tests/fixtures/flux-tiny/reference/reference.json")))["prompts"]:
        out.append(p)
    # Inline strings of tests/tokenizer_test.cpp, clip_text_test.cpp, hostile_inputs_test.cpp.
    out += ["a red circle on a blue background", "it'S  a 12\n\n  b", "a  b c   d",
            "Cafe\u0301 A\u030A \u1100\u1161\u11A8 q\u0307\u0323",
            "\u0130STANBUL \u03A3\u039F\u03A3 \u00C9T\u00C9 \u0245", "CAFE\u0301  \t CRE\u0300ME",
            "café crème", "a a b", "a", "<aa1<a0", "word " * 20000,
            "".join("word, " if i % 7 else "  \n\n12 it's " for i in range(20000)),
            " " * 200000 + "x"]
    return [s for s in out if "\0" not in s]


def main():
    os.makedirs(out_dir, exist_ok=True)
    docs = []
    total = 0
    while total < target:
        r = R.random()
        acc = 0
        for fn, w in KINDS:
            acc += w
            if r < acc:
                break
        d = fn(R.randint(200, 3000))
        docs.append(d)
        total += len(d.encode())
    tests = test_strings()
    with open(os.path.join(out_dir, "corpus.bin"), "wb") as f:
        f.write(b"\0".join(d.encode() for d in docs))
    with open(os.path.join(out_dir, "tests.bin"), "wb") as f:
        f.write(b"\0".join(d.encode() for d in tests))
    stress = []
    for base in range(0, 0x110000, 256):
        cps = [c for c in range(base, base + 256) if c and not 0xD800 <= c <= 0xDFFF]
        if cps:
            # Each code point alone, after a letter, before a space, and next to a combining mark:
            # the contexts where class membership decides a split.
            stress.append("".join(chr(c) + " a" + chr(c) + "1" + chr(c) + "\u0301 " for c in cps))
    with open(os.path.join(out_dir, "corpus_stress.bin"), "wb") as f:
        f.write(b"\0".join(d.encode("utf-8") for d in stress))
    print(f"corpus: {len(docs)} docs, {total} bytes; tests: {len(tests)} strings; "
          f"stress: {len(stress)} docs, {sum(len(s.encode()) for s in stress)} bytes")


main()

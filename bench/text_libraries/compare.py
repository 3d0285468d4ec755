#!/usr/bin/env python3
"""Checks the bench's dumps (DIR/dump) against Hugging Face tokenizers' (DIR/hf): which of ours /
PCRE2 / ICU agrees with HF (the reference mmgen must reproduce). Prints markdown.
    python3 compare.py DIR
"""
import json, os, sys

D = sys.argv[1]
SETS = ["tests", "corpus", "corpus_stress"]


def docs(name):
    return open(os.path.join(D, name), "rb").read().split(b"\0")


def lines(path):
    with open(path) as f:
        return f.read().split("\n")[:-1]


def show(b):
    return json.dumps(b.decode("utf-8", "ignore"))


def first_diff_matches(doc, a, b):
    a, b = a.split(), b.split()
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    def piece(m):
        if k >= len(m):
            return "(none)"
        s, e = map(int, m[k].split(","))
        return show(doc[s:e])
    at = int((a[k] if k < len(a) else b[k]).split(",")[0])
    return f"near {show(doc[max(0, at - 8):at + 12])}: {{}} {piece(a)}, HF {piece(b)}"


print("## Against Hugging Face tokenizers 0.23.3 (Oniguruma): split matches\n")
print("| pattern | set | ours != HF | PCRE2 != HF | first PCRE2/HF difference | first ours/HF difference |")
print("|---|---|---|---|---|---|")
for pat in ["qwen2", "gpt2", "clip", "whitespace", "space_run", "llama3"]:
    for s in SETS:
        ds = docs(s + ".bin")
        hf = lines(os.path.join(D, "hf", f"{s}.{pat}.matches"))
        row = []
        ex = {}
        for eng in ["ours", "pcre2"]:
            mine = lines(os.path.join(D, "dump", f"{s}.{pat}.{eng}.matches"))
            bad = [i for i in range(len(ds)) if mine[i] != hf[i]]
            row.append(len(bad))
            if bad:
                ex[eng] = first_diff_matches(ds[bad[0]], mine[bad[0]], hf[bad[0]]).format(eng)
        print(f"| {pat} | {s} | {row[0]} | {row[1]} | {ex.get('pcre2', '')} | {ex.get('ours', '')} |")
    if pat == "whitespace":  # also against HF's Whitespace pre-tokenizer (Rust regex crate)
        for s in SETS:
            ds = docs(s + ".bin")
            hf = lines(os.path.join(D, "hf", f"{s}.whitespace_rust.matches"))
            row, ex = [], {}
            for eng in ["ours", "pcre2"]:
                mine = lines(os.path.join(D, "dump", f"{s}.whitespace.{eng}.matches"))
                bad = [i for i in range(len(ds)) if mine[i] != hf[i]]
                row.append(len(bad))
                if bad:
                    ex[eng] = first_diff_matches(ds[bad[0]], mine[bad[0]], hf[bad[0]]).format(eng)
            print(f"| whitespace vs HF Whitespace() (Rust regex) | {s} | {row[0]} | {row[1]} | {ex.get('pcre2', '')} | {ex.get('ours', '')} |")

print("\n## Against HF: NFC and Lowercase normalizers\n")
print("| normalizer | set | ours != HF | ICU != HF | first ICU/HF difference | first ours/HF difference |")
print("|---|---|---|---|---|---|")
for norm, hfname, variants in [("nfc", "nfc", ["icu"]), ("lower", "lower", ["icu"]),
                               ("lower_icu_per_codepoint", "lower", ["icu"])]:
    for s in SETS:
        hf = docs(f"hf/{s}.{hfname}")
        ours = docs(f"dump/{s}.{norm}.ours")
        icu = docs(f"dump/{s}.{norm}.icu")
        src = docs(s + ".bin")
        def diffs(mine):
            bad = [i for i in range(len(hf)) if mine[i] != hf[i]]
            ex = ""
            if bad:
                i = bad[0]
                a, b = mine[i], hf[i]
                k = 0
                while k < min(len(a), len(b)) and a[k] == b[k]:
                    k += 1
                ex = f"{show(a[max(0, k - 10):k + 10])} vs HF {show(b[max(0, k - 10):k + 10])}"
            return len(bad), ex
        no, eo = diffs(ours)
        ni, ei = diffs(icu)
        print(f"| {norm} | {s} | {no} | {ni} | {ei} | {eo} |")

print("\n## Against HF: token ids (FNV hash of each doc's ids)\n")
print("| tokenizer | set | ours != HF | PCRE2-JIT+ICU != HF | PCRE2-JIT+ICU(per-code-point lower) != HF | first doc where ours != HF |")
print("|---|---|---|---|---|---|")
for tok in ["trained-qwen2", "trained-clip", "qwen3-tiny", "zimage-tiny", "qwenimage-tiny",
            "clip-tokenizer-json", "flux-t5", "wan-tiny"]:
    for s in SETS:
        hf = lines(os.path.join(D, "hf", f"{s}.{tok}.idhash"))
        src = docs(s + ".bin")
        row, first = [], ""
        for b in ["ours", "pcre2-jit+icu", "pcre2-jit+icu-per-cp-lower"]:
            mine = lines(os.path.join(D, "dump", f"{s}.{tok}.{b}.idhash"))
            bad = [i for i in range(len(hf)) if mine[i] != hf[i]
                   and not (tok.startswith("trained") and len(src[i]) > 50000)]
            row.append(len(bad))
            if b == "ours" and bad:
                first = f"doc {bad[0]}: {show(src[bad[0]][:60])}"
        print(f"| {tok} | {s} | {row[0]} | {row[1]} | {row[2]} | {first} |")

#!/usr/bin/env python3
"""The Hugging Face tokenizers (0.23.3, Oniguruma) side of the measurement.

    python3 hf_side.py DIR train     # trains 32k-vocab Qwen2-style and CLIP-style BPE tokenizers
                                     # on DIR/corpus.bin -> DIR/trained-{qwen2,clip}/tokenizer.json
    python3 hf_side.py DIR oracle    # HF's matches / normalizer outputs / ids -> DIR/hf/*
"""
import json, os, sys
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers

D = sys.argv[1]
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CLIP = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
WHITESPACE = r"""\w+|[^\w\s]+"""
SPACE_RUN = r"""\s+"""
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
PATTERNS = {"qwen2": QWEN2, "gpt2": GPT2, "clip": CLIP, "whitespace": WHITESPACE,
            "space_run": SPACE_RUN, "llama3": LLAMA3}


def docs(name):
    return open(os.path.join(D, name), "rb").read().decode("utf-8").split("\0")


def train():
    corpus = docs("corpus.bin")
    # Qwen2-style: NFC, Split(Qwen2 pattern, Isolated), ByteLevel(use_regex=False).
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(corpus, tr)
    os.makedirs(os.path.join(D, "trained-qwen2"), exist_ok=True)
    t.save(os.path.join(D, "trained-qwen2/tokenizer.json"))
    # CLIP-style: NFC, Replace(\s+ -> " "), Lowercase; Split(CLIP, Removed, invert); ByteLevel.
    c = Tokenizer(models.BPE(end_of_word_suffix="</w>", unk_token="<|endoftext|>"))
    c.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(SPACE_RUN), " "),
                                         normalizers.Lowercase()])
    c.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    c.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|startoftext|>", "<|endoftext|>"],
                             end_of_word_suffix="</w>", initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    c.train_from_iterator(corpus, tr)
    os.makedirs(os.path.join(D, "trained-clip"), exist_ok=True)
    c.save(os.path.join(D, "trained-clip/tokenizer.json"))
    print("trained", t.get_vocab_size(), c.get_vocab_size())


SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SHARED = os.path.join(SRC, "..", "shared")
TOKENIZERS = {
    "trained-qwen2": os.path.join(D, "trained-qwen2/tokenizer.json"),
    "trained-clip": os.path.join(D, "trained-clip/tokenizer.json"),
    "qwen3-tiny": os.path.join(SHARED, "fixtures/qwen3-tiny/model/tokenizer/tokenizer.json"),
    "zimage-tiny": os.path.join(SHARED, "fixtures/zimage-tiny/model/tokenizer/tokenizer.json"),
    "qwenimage-tiny": os.path.join(SRC, "tests/fixtures/qwenimage-tiny/model/tokenizer/tokenizer.json"),
    "clip-tokenizer-json": os.path.join(SRC, "tests/data/clip_tokenizer_json/tokenizer.json"),
    "flux-t5": os.path.join(SRC, "tests/fixtures/flux-tiny/model/tokenizer_2/tokenizer.json"),
    "wan-tiny": os.path.join(SHARED, "fixtures/wan-tiny/model/tokenizer/tokenizer.json"),
}


def fnv1a64(data):
    h = 1469598103934665603
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def byte_offsets(s):
    out = [0]
    for ch in s:
        out.append(out[-1] + len(ch.encode("utf-8")))
    return out


def oracle():
    out = os.path.join(D, "hf")
    os.makedirs(out, exist_ok=True)
    for set_name in ["corpus", "tests", "corpus_stress"]:
        ds = docs(set_name + ".bin")
        offs = [byte_offsets(d) for d in ds]
        for name, pat in PATTERNS.items():
            split = pre_tokenizers.Split(Regex(pat), behavior="removed", invert=True)
            with open(os.path.join(out, f"{set_name}.{name}.matches"), "w") as f:
                for d, o in zip(ds, offs):
                    f.write(" ".join(f"{o[b]},{o[e]}" for _, (b, e) in split.pre_tokenize_str(d)) + "\n")
        for name, norm in [("nfc", normalizers.NFC()), ("lower", normalizers.Lowercase())]:
            with open(os.path.join(out, f"{set_name}.{name}"), "wb") as f:
                f.write(b"\0".join(norm.normalize_str(d).encode("utf-8") for d in ds))
        # HF's own Whitespace pre-tokenizer (Rust regex crate, not Oniguruma).
        with open(os.path.join(out, f"{set_name}.whitespace_rust.matches"), "w") as f:
            ws = pre_tokenizers.Whitespace()
            for d, o in zip(ds, offs):
                f.write(" ".join(f"{o[b]},{o[e]}" for _, (b, e) in ws.pre_tokenize_str(d)) + "\n")
        for tok, path in TOKENIZERS.items():
            t = Tokenizer.from_file(path)
            with open(os.path.join(out, f"{set_name}.{tok}.idhash"), "w") as f:
                for e in t.encode_batch(ds, add_special_tokens=False):
                    f.write(f"{fnv1a64(' '.join(map(str, e.ids)).encode()):016x}\n")
        print("oracle", set_name, len(ds))


{"train": train, "oracle": oracle}[sys.argv[2]]()

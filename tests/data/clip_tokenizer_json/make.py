"""The flux-tiny CLIP tokenizer saved by transformers' CLIPTokenizer.save_pretrained, which writes a
tokenizer.json (as openai/clip-vit-large-patch14 ships one): the same ids must come out of it as
out of vocab.json + merges.txt (tests/clip_text_test.cpp).

    python3 tests/data/clip_tokenizer_json/make.py
"""
import os

from transformers import CLIPTokenizer

here = os.path.dirname(os.path.abspath(__file__))
tokenizer = CLIPTokenizer.from_pretrained(
    os.path.join(here, "..", "..", "fixtures", "flux-tiny", "model", "tokenizer"))
tokenizer.save_pretrained(here)
for name in os.listdir(here):
    if name not in ("make.py", "tokenizer.json", "tokenizer_config.json"):
        os.remove(os.path.join(here, name))
print(sorted(os.listdir(here)))

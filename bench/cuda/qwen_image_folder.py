"""Writes a random-weight Qwen-Image-sized diffusers folder for `mmgen generate`: the transformer
and VAE ../shared/tools/peers/image_anchors.py times in diffusers (QwenImageTransformer2DModel and
AutoencoderKLQwenImage with their class defaults, 20.4B; bf16, built on the GPU with seed 0), a
2-layer Qwen2.5-VL language model of the real width (the anchor skips the encoder: mmgen's encode
stage is reported apart), Qwen-Image's scheduler, and the tokenizer of tests/fixtures/qwenimage-tiny.
usage: python3 qwen_image_folder.py DIR QWENIMAGE_TINY_MODEL_DIR   (needs torch, diffusers,
transformers)"""
import json
import os
import shutil
import sys

import torch
from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler,
                       QwenImageTransformer2DModel)
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

out, tiny = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
text_config = json.load(open(os.path.join(tiny, "text_encoder", "config.json")))
text = text_config.get("text_config", text_config)
text.update(hidden_size=3584, intermediate_size=18944, num_hidden_layers=2, num_attention_heads=28,
            num_key_value_heads=4, vocab_size=152064)
for key in ("head_dim", "layer_types", "max_window_layers"):
    text.pop(key, None)
text_config["vision_config"]["out_hidden_size"] = 3584  # the merger feeds the language model
if "rope_scaling" in text and text["rope_scaling"]:
    text["rope_scaling"]["mrope_section"] = [16, 24, 24]
if "rope_parameters" in text and text["rope_parameters"]:
    text["rope_parameters"]["mrope_section"] = [16, 24, 24]
config = Qwen2_5_VLConfig.from_dict(text_config)
with torch.device("cuda"):
    transformer = QwenImageTransformer2DModel().to(torch.bfloat16)
    vae = AutoencoderKLQwenImage().to(torch.bfloat16)
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16)
os.makedirs(out, exist_ok=True)
transformer.save_pretrained(os.path.join(out, "transformer"), max_shard_size="10GB")
vae.save_pretrained(os.path.join(out, "vae"))
text_encoder.save_pretrained(os.path.join(out, "text_encoder"), max_shard_size="10GB")
FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                                base_image_seq_len=256, max_image_seq_len=8192,
                                time_shift_type="exponential", shift_terminal=0.02).save_pretrained(
    os.path.join(out, "scheduler"))
shutil.copytree(os.path.join(tiny, "tokenizer"), os.path.join(out, "tokenizer"), dirs_exist_ok=True)
shutil.copy(os.path.join(tiny, "model_index.json"), os.path.join(out, "model_index.json"))
print("made", out, "transformer %.2fB params" % (sum(p.numel() for p in transformer.parameters()) / 1e9))

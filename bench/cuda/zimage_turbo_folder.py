"""Writes a random-weight Z-Image-Turbo-sized diffusers folder for `mmgen generate`: the modules
../shared/tools/peers/zimage_anchor.py times in diffusers (a 6.15B ZImageTransformer2DModel with the
class defaults, a Qwen3-4B-shaped Qwen3Model, the FLUX VAE; bf16, built on the GPU with seed 0), the
scheduler it uses (shift 3, no dynamic shifting), and the tokenizer folder given (its chat template
included). So mmgen and diffusers run the same request on the same shapes in the same session.
usage: python3 zimage_turbo_folder.py DIR TOKENIZER_DIR   (needs torch, diffusers, transformers)"""
import json
import os
import shutil
import sys

import torch
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImageTransformer2DModel
from transformers import Qwen3Config, Qwen3Model

out, tokenizer_dir = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
with torch.device("cuda"):
    transformer = ZImageTransformer2DModel().to(torch.bfloat16)
    text_encoder = Qwen3Model(Qwen3Config(
        vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rope_theta=1000000.0, rms_norm_eps=1e-6)).to(torch.bfloat16)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16,
                        block_out_channels=(128, 256, 512, 512),
                        down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2,
                        scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                        use_post_quant_conv=False).to(torch.bfloat16)
os.makedirs(out, exist_ok=True)
transformer.save_pretrained(os.path.join(out, "transformer"), max_shard_size="5GB")
text_encoder.save_pretrained(os.path.join(out, "text_encoder"), max_shard_size="5GB")
vae.save_pretrained(os.path.join(out, "vae"))
FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=False).save_pretrained(
    os.path.join(out, "scheduler"))
shutil.copytree(tokenizer_dir, os.path.join(out, "tokenizer"), dirs_exist_ok=True)
with open(os.path.join(out, "model_index.json"), "w") as f:
    json.dump({"_class_name": "ZImagePipeline", "_diffusers_version": "0.42.1",
               "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
               "text_encoder": ["transformers", "Qwen3Model"],
               "tokenizer": ["transformers", "Qwen2Tokenizer"],
               "transformer": ["diffusers", "ZImageTransformer2DModel"],
               "vae": ["diffusers", "AutoencoderKL"]}, f, indent=2)
print("made", out, "transformer %.2fB params" % (sum(p.numel() for p in transformer.parameters()) / 1e9))

"""Writes a random-weight Wan2.1-T2V-14B-shaped diffusers folder for `mmgen generate --gpus N`: the
14B transformer of the release's config (40 layers, 40 heads x 128, ffn 13824, text_dim 4096), the
real Wan VAE (AutoencoderKLWan's defaults), a UMT5 encoder of the release's width (d_model 4096, so
the prompt rows have the real shape) with 2 layers, or TEXT_LAYERS (24: UMT5-XXL's 11 GB, for the
GPU memory figures; 2 keeps the multi-GPU runs' upload short), the
release's UniPC scheduler (flow shift 5 for 720p) and the tokenizer folder given. bf16, built on the
GPU with seed 0. The multi-GPU figures of docs/performance-history.md were measured on this folder.
usage: python3 wan14b_folder.py DIR TOKENIZER_DIR [TEXT_LAYERS]   (needs torch, diffusers,
transformers)"""
import json
import os
import shutil
import sys

import torch
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel
from transformers import UMT5Config, UMT5EncoderModel

out, tokenizer_dir = sys.argv[1], sys.argv[2]
text_layers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
torch.manual_seed(0)
with torch.device("cuda"):
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=40, attention_head_dim=128, in_channels=16,
        out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40,
        cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
        rope_max_seq_len=1024).to(torch.bfloat16)
    text_encoder = UMT5EncoderModel(UMT5Config(
        vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=text_layers, num_heads=64,
        relative_attention_num_buckets=32, relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu", dense_act_fn="gelu_new", is_gated_act=True,
        layer_norm_epsilon=1e-6, tie_word_embeddings=False)).to(torch.bfloat16)
    vae = AutoencoderKLWan().to(torch.float32)
os.makedirs(out, exist_ok=True)
transformer.save_pretrained(os.path.join(out, "transformer"), max_shard_size="10GB")
text_encoder.save_pretrained(os.path.join(out, "text_encoder"), max_shard_size="10GB")
vae.save_pretrained(os.path.join(out, "vae"))
UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                        flow_shift=5.0).save_pretrained(os.path.join(out, "scheduler"))
shutil.copytree(tokenizer_dir, os.path.join(out, "tokenizer"), dirs_exist_ok=True)
with open(os.path.join(out, "model_index.json"), "w") as f:
    json.dump({"_class_name": "WanPipeline", "_diffusers_version": "0.42.1",
               "scheduler": ["diffusers", "UniPCMultistepScheduler"],
               "text_encoder": ["transformers", "UMT5EncoderModel"],
               "tokenizer": ["transformers", "T5Tokenizer"],
               "transformer": ["diffusers", "WanTransformer3DModel"],
               "vae": ["diffusers", "AutoencoderKLWan"]}, f, indent=2)
print("made", out, "transformer %.2fB params" % (sum(p.numel() for p in transformer.parameters()) / 1e9))
